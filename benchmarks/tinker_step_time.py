"""The Tinker backend's step time through traces, beside the same RL loop written directly against the engine.

    python -m benchmarks.tinker_step_time [--steps 10] [--batch-size 4] [--group-size 8] [--max-tokens 16]

Both sides train the same local engine (the tiny offline Qwen2, LoRA rank 32) on hello.py's task with the same
sampling, loss (`importance_sampling`) and advantages, side by side in one run:
- direct: what a Tinker cookbook loop does in one process: render the prompt, `sampler.sample`, score, build datums,
  `forward_backward`, `optim_step`, `save_weights_and_get_sampler`; no agent framework, no HTTP, no spans;
- traced: `agl.Tinker` with `Trainer(n_runners=2)`: the OpenAI-client agent in runner processes, the policy gateway
  in front of the sampler, spans over OTLP to an embedded collector (SQLite), read back, adapted to datums.
The ratio is what running the user's own agent through lightning-otel costs per step on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning_otel as agl
from benchmarks._rollout_phases import format_run_phases, run_phases
from lightning_otel.agent_api.script_folder import import_from_folder
from lightning_otel.collector import EmbeddedCollector
from lightning_otel.testing.tiny_model import save_tiny_model
from lightning_otel.training.tinker.types import AdamParams, Datum, SamplingParams

ROOT = Path(__file__).resolve().parents[1]
(hello,) = import_from_folder(ROOT / "examples" / "tinker", "hello")  # the example's task, agent and reward


def direct_loop(model: Path, tasks: list[dict], args: argparse.Namespace) -> list[float]:
    engine = agl.LocalEngine(model, rank=32, seed=0)
    sampler = engine.save_weights_and_get_sampler("step-0")
    tokenizer = engine.chat_tokenizer
    times = []
    for step in range(args.steps):
        started = time.perf_counter()
        batch = [tasks[(step * args.batch_size + i) % len(tasks)] for i in range(args.batch_size)]
        datums = []
        for task in batch:
            messages = [{"role": "system", "content": f"You are {task['identity']}."},
                        {"role": "user", "content": task["question"]}]  # fmt: skip
            prompt = tokenizer.encode(tokenizer.render_chat(messages))
            sequences = sampler.sample(prompt, args.group_size, SamplingParams(max_tokens=args.max_tokens))
            eos = tokenizer.eos_token_id
            rewards = [hello.similarity(tokenizer.decode([t for t in s.tokens if t != eos]), task["identity"])
                       for s in sequences]  # fmt: skip
            mean = statistics.fmean(rewards)
            for sequence, reward in zip(sequences, rewards, strict=True):
                zeros = [0.0] * len(prompt)
                datums.append(Datum.from_sequence(prompt + sequence.tokens, {
                    "logprobs": zeros + sequence.logprobs, "advantages": zeros + [reward - mean] * len(sequence.tokens),
                }))  # fmt: skip
        engine.forward_backward(datums, "importance_sampling")
        engine.optim_step(AdamParams(learning_rate=1e-2))
        sampler = engine.save_weights_and_get_sampler(f"step-{step + 1}")
        times.append(time.perf_counter() - started)
    return times


def traced_loop(model: Path, tasks: list[dict], args: argparse.Namespace) -> tuple[list[float], dict[str, Any]]:
    """Step times and where the rollouts' time went (per attempt, per batch), steps after the first."""
    times: list[float] = []
    last = [time.perf_counter()]

    def on_step(step: int, metrics: dict[str, float]) -> None:
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now

    options = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=args.batch_size, group_size=args.group_size, max_steps=args.steps),
        sampling=agl.Sampling(max_tokens=args.max_tokens), trackers=agl.Trackers(logger=()), on_step=on_step,
    )  # fmt: skip
    algorithm = agl.Tinker(agl.LocalEngine(model, rank=32, seed=0), options, learning_rate=1e-2)
    # the collector a Trainer would start, kept open after fit to read where the rollouts' time went
    with tempfile.TemporaryDirectory() as folder, EmbeddedCollector.on_sqlite_file(Path(folder) / "c.db") as addresses:
        trainer = agl.Trainer(n_runners=2, algorithm=algorithm, collector=addresses.query, progress=False)
        last[0] = time.perf_counter()
        trainer.fit(hello.hello_agent, tasks)
        return times, run_phases(addresses.query, skip_batches=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="3 steps of 2x2 rollouts, seconds: that it runs")
    parser.add_argument("--model", default="tiny",
                        help="tiny (a random Qwen2 built offline, the default), smollm2 (SmolLM2-135M-Instruct) or a "
                             "model folder")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.steps, args.batch_size, args.group_size, args.max_tokens = 3, 2, 2, 4
    tasks, _ = hello.hello_tasks()
    with tempfile.TemporaryDirectory() as folder:
        if args.model == "tiny":
            model = save_tiny_model(Path(folder) / "tiny")
        else:
            from lightning_otel.models.named import model_folder

            model = model_folder(args.model)
        direct = direct_loop(model, tasks, args)
        traced, phases = traced_loop(model, tasks, args)
    if len(direct) != args.steps or len(traced) != args.steps:
        sys.exit(f"steps run: direct {len(direct)}, traced {len(traced)} of {args.steps}: not a measurement")
    # the first traced step includes runner start-up; report the median of the steps after it for both
    direct_s, traced_s = statistics.median(direct[1:]), statistics.median(traced[1:])
    rollouts = args.batch_size * args.group_size
    print(f"{args.steps} steps of {rollouts} rollouts ({args.max_tokens} tokens max) on {args.model}, median step "
          "after the first:")  # fmt: skip
    for label, seconds in (("direct engine loop (no agent, no HTTP, no spans)", direct_s),
                           ("agl.Tinker through traces (2 runner processes)", traced_s)):  # fmt: skip
        print(f"  {label:<50} {seconds:.2f} s  ({rollouts / seconds:.1f} rollouts/s)")
    print(f"  ratio traced / direct: {traced_s / direct_s:.2f}x; first traced step (runner start-up) {traced[0]:.1f} s")
    print("  traced, where the rollouts' time went (steps after the first):")
    print(format_run_phases(phases))


if __name__ == "__main__":
    main()
