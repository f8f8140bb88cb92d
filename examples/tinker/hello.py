"""Hello: teach a policy to introduce itself with a target identity, with the Tinker-shaped backend.

    python hello.py oneclick                      # collector, algorithm and runners in one command
    agl-otel-collector --query-port 4747 --http-port 4748 --grpc-port -1 --store logs/hello/store.sqlite3
    python hello.py algo --port 4747              # the algorithm, against that collector
    python hello.py runner --port 4747            # a runner (start more at any time, in other terminals)

The agent is ordinary OpenAI-client code: it asks the policy "Who are you?" (in several wordings, with the identity
it should claim in the system prompt) and rewards the answer by its similarity to "I am {identity}." (difflib's
ratio: 1.0 for the exact sentence, a fraction for a partial one, so even a random policy gets a usable signal).
By default the policy is a tiny random Qwen2 built offline (`--model` takes any Hugging Face model folder) trained
with LoRA by the local engine on this machine; `--remote` trains on the hosted Tinker service instead
(TINKER_API_KEY; `--model` is then a Tinker base model name).
"""

from __future__ import annotations

import argparse
import difflib
import functools
import itertools
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

from openai import OpenAI

import lightning_otel as agl

HERE = Path(__file__).resolve().parent
IDENTITIES = ("Lightning", "Tinker", "Otel", "Hello")
QUESTIONS = ("Who are you?", "Introduce yourself.", "What is your name?", "Hi! Who am I talking to?")


def target_sentence(identity: str) -> str:
    return f"I am {identity}."


def similarity(answer: str, identity: str) -> float:
    return difflib.SequenceMatcher(None, answer.strip(), target_sentence(identity)).ratio()


@functools.cache
def openai_client(base_url: str, api_key: str) -> OpenAI:
    """One client per endpoint, reused by every rollout: building one loads certifi's CA bundle into a new SSL
    context (~20 ms of CPU), which a client per rollout would pay each time."""
    return OpenAI(base_url=base_url, api_key=api_key, max_retries=5)


@agl.rollout
def hello_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """One question, one answer; the reward is the answer's similarity to the target sentence."""
    client = openai_client(llm.endpoint, llm.api_key or "unused")
    response = client.chat.completions.create(
        model=llm.model,
        messages=[
            {"role": "system", "content": f"You are {task['identity']}."},
            {"role": "user", "content": task["question"]},
        ],
        max_tokens=16,
    )
    return similarity(response.choices[0].message.content or "", task["identity"])


def hello_tasks() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Every identity x question; validation: one question per identity, held out of training."""
    tasks = [
        {"task_id": f"{identity}-{index}", "identity": identity, "question": question}
        for identity, (index, question) in itertools.product(IDENTITIES, enumerate(QUESTIONS))
    ]
    val = [task for task in tasks if task["task_id"].endswith("-3")]
    return [task for task in tasks if task not in val], val


def engine_for(args: argparse.Namespace) -> Any:
    if args.remote:
        return agl.RemoteEngine(args.model or "Qwen/Qwen3-4B-Instruct-2507", rank=args.rank)
    model = Path(args.model) if args.model else args.workdir / "model"
    if not args.model and not (model / "config.json").exists():
        from lightning_otel.testing import save_tiny_model

        save_tiny_model(model, seed=args.seed)  # offline: a tiny random Qwen2 and the offline tokenizer
    return agl.LocalEngine(model, rank=args.rank, seed=args.seed, log_dir=args.workdir)


def algorithm(args: argparse.Namespace) -> agl.Tinker:
    options = agl.TrainingOptions(
        schedule=agl.Schedule(
            batch_size=args.batch_size, group_size=args.group_size, max_steps=args.steps, val_every=args.val_every
        ),
        sampling=agl.Sampling(max_tokens=16),
        trackers=agl.Trackers(logger=("console", "jsonl"), log_dir=args.workdir),
    )
    return agl.Tinker(engine_for(args), options, learning_rate=args.learning_rate, loss_fn=args.loss_fn)


def report(result: agl.TrainingResult, started: float, workdir: Path, window: int, *, rise_required: bool) -> int:
    """The reward curve: printed, plotted, and the rise measured (first vs last `window` steps)."""
    metrics = result.metrics(window)
    rewards = result.rewards()
    print("\nreward per step: " + " ".join(f"{reward:.3f}" for reward in rewards))
    print(
        f"mean reward, first {window} steps: {metrics['reward/first_steps']:.3f}; last {window} steps: "
        f"{metrics['reward/last_steps']:.3f}; validation {metrics['val/first']:.3f} -> {metrics['val/last']:.3f}; "
        f"{len(rewards)} steps in {time.monotonic() - started:.0f} s"
    )
    plot(rewards, result.validation, workdir / "reward_curve.png")
    rise, noise = rise_and_noise(rewards, window)
    if math.isnan(noise):  # windows of one step: no spread to measure a rise against
        if rise_required:
            print(f"{len(rewards)} steps are too few to tell a rise from noise (windows of {window} step): run more",
                  file=sys.stderr)  # fmt: skip
            return 1
        return 0
    print(f"rise {rise:+.3f} = {rise / noise if noise else math.inf:+.1f} x its noise ({noise:.3f}: the standard error "
          f"of the two windows' means); a rise counts beyond {RISE_BEYOND_NOISE:g} x")  # fmt: skip
    if rise_required and not rise > RISE_BEYOND_NOISE * noise:
        print("the reward did not rise beyond its noise: see the per-step metrics in", workdir / "metrics.jsonl",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


RISE_BEYOND_NOISE = 2.0  # standard errors of the difference of the two windows' means


def rise_and_noise(rewards: list[float], window: int) -> tuple[float, float]:
    """The last window's mean reward minus the first's, and that difference's standard error (each window's per-step
    rewards' sample variance over its steps, added)."""
    import statistics

    head, tail = rewards[:window], rewards[-window:]
    rise = statistics.fmean(tail) - statistics.fmean(head)
    if len(head) < 2 or len(tail) < 2:
        return rise, math.nan
    return rise, math.sqrt(statistics.variance(head) / len(head) + statistics.variance(tail) / len(tail))


def plot(rewards: list[float], validation: list[tuple[int, float]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    figure, axes = plt.subplots(figsize=(6, 3.5))
    axes.plot(range(1, len(rewards) + 1), rewards, marker=".", label="train reward (mean per step)")
    if validation:
        axes.plot(*zip(*[(s, r) for s, r in validation if not math.isnan(r)], strict=True), marker="o",
                  label="validation reward (greedy)")  # fmt: skip
    axes.set_xlabel("step")
    axes.set_ylabel("similarity to 'I am {identity}.'")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    print("reward curve:", path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["oneclick", "algo", "runner"])
    parser.add_argument("--port", type=int, default=4747, help="algo/runner: the collector's query port")
    parser.add_argument("--host", default="127.0.0.1", help="algo/runner: the collector's host")
    parser.add_argument("--n-runners", type=int, default=2, help="oneclick: runner processes; runner: processes")
    parser.add_argument("--keep-serving", action="store_true", help="runner: stay when the training ends")
    parser.add_argument("--steps", type=int, help="training steps (default 40; 3 with --ci)")
    parser.add_argument("--ci", action="store_true", help="CI: every step must train; a rise is not required")
    parser.add_argument("--batch-size", type=int, default=4, help="tasks per step")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per task")
    parser.add_argument("--learning-rate", type=float, default=1e-2)
    parser.add_argument("--loss-fn", default="importance_sampling", choices=["importance_sampling", "ppo"])
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--val-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", help="a Hugging Face model folder (default: a tiny random Qwen2 built offline)")
    parser.add_argument("--remote", action="store_true", help="train on the hosted Tinker service (TINKER_API_KEY)")
    parser.add_argument("--workdir", type=Path, default=HERE / "logs" / "hello")
    parser.add_argument("-v", "--verbose", action="store_true", help="other libraries' output here, not in train.log")
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = 3 if args.ci else 40
    if args.ci:
        args.val_every = min(args.val_every, args.steps)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args.workdir.mkdir(parents=True, exist_ok=True)
    collector = f"http://{args.host}:{args.port}"
    if args.mode == "runner":
        return runner(collector, args)
    train, val = hello_tasks()
    started = time.monotonic()
    trainer = agl.Trainer(
        n_runners=args.n_runners if args.mode == "oneclick" else 0,
        algorithm=algorithm(args),
        collector=None if args.mode == "oneclick" else collector,
        settings=agl.RunSettings(no_runner_timeout_s=None if args.mode == "oneclick" else 600),
    )
    if not args.verbose:
        print(f"other libraries' output (torch, the runners): {args.workdir / 'train.log'}  (-v shows it here)")
    with agl.quiet(args.workdir / "train.log", verbose=args.verbose):
        result = trainer.fit(hello_agent, train, val)
    rose = report(result, started, args.workdir, window=min(5, max(1, args.steps // 3)), rise_required=not args.ci)
    if args.ci:  # a rise over 3 steps is noise: what must hold is that every step trained
        untrained = [index for index, step in enumerate(result.steps, 1) if not step.metrics["train/datums"]]
        if untrained:
            print(f"steps {untrained} trained nothing", file=sys.stderr)
            return 1
        return 0
    return rose


def runner(collector: str, args: argparse.Namespace) -> int:
    """`--n-runners` runner processes against the collector; they stop when the training ends."""
    from lightning_otel import RunnerOptions, run_runner_processes

    options = RunnerOptions(max_concurrency=8, stop_when_training_ends=not args.keep_serving)
    return run_runner_processes(hello_agent, collector, n_runners=args.n_runners, options=options)


if __name__ == "__main__":
    sys.exit(main())
