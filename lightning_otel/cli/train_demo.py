"""`lightning-otel demo`: the whole loop on one CPU machine in a few minutes, with nothing downloaded.

A tiny random Qwen2 (built offline) is the policy. Two agents run in runner processes: `write` answers a task,
`check` comments on the answer. The reward is the share of capital letters in the writer's answer, a toy task a tiny
model can learn. Their spans go over OTLP to an embedded `agl-otel-collector` (SQLite in the work directory);
`agent_match="write"` makes the writer's calls the training samples; verl runs GRPO on CPU through our CPU backend;
the policy gateway serves the updated weights to the next step. It shows the training loop's progress, the reward's
rise, writes a reward-curve PNG and says in one line how to open the rollout view over the run's store; every
other library's output goes to the work directory's demo.log (`-v`: to the terminal). A run of 20 steps or more whose
reward did not rise by 0.05 (last quarter's mean over the first's) says so and exits 1.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning_otel

WORDS = (
    "orders",
    "customers",
    "revenue",
    "products",
    "invoices",
    "shipments",
    "refunds",
    "suppliers",
    "regions",
    "payments",
    "returns",
    "discounts",
    "carts",
    "sessions",
    "reviews",
    "coupons",
    "warehouses",
    "employees",
    "budgets",
    "forecasts",
)
TASKS = [{"id": f"w{index:02d}", "word": word} for index, word in enumerate(WORDS)]


def capitals_share(text: str) -> float:
    """The toy reward: capital letters / letters (0 when there are no letters)."""
    letters = [char for char in text if char.isalpha()]
    return sum(char.isupper() for char in letters) / len(letters) if letters else 0.0


def demo_reward(answer: str, task: dict[str, Any]) -> float:
    """The capital-letter share; for a model that can read (`"say_word"` tasks), the mean of that share and whether
    the answer holds the task's word (in any case): 1 only for the word, all in capitals."""
    if not task.get("say_word"):
        return capitals_share(answer)
    return (capitals_share(answer) + float(task["word"] in answer.lower())) / 2


@functools.cache
def _client(base_url: str, api_key: str) -> Any:
    import openai

    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=5)  # 503 + Retry-After during weight sync


@lightning_otel.rollout
def shout_rollout(task: dict[str, Any], resources: dict[str, Any], rollout: lightning_otel.Rollout) -> float:
    llm = resources["main_llm"]
    client = _client(llm.get_base_url(rollout.rollout_id, rollout.attempt_id), llm.api_key)

    def ask(prompt: str) -> str:
        reply = client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": prompt}])
        return reply.choices[0].message.content or ""

    with lightning_otel.agent("write"):
        ask_for = "Repeat this word in capital letters: {}" if task.get("say_word") else "Say it in CAPITAL LETTERS: {}"
        answer = ask(ask_for.format(task["word"]))
    with lightning_otel.agent("check"):
        ask(f"Is this in capital letters? {answer}")
    return demo_reward(answer, task)


@dataclass(frozen=True, slots=True)
class DemoPolicy:
    """What `--model` changes in the demo: the policy, how it is described, its learning rate and sampling."""

    description: str
    steps: int  # the default number of steps
    learning_rate: float
    temperature: float = 1.0
    prompt_length: int = 128
    say_word: bool = False  # the reward asks for the task's word in capitals, not only capitals (`demo_reward`)


POLICIES = {
    "tiny": DemoPolicy("a tiny random Qwen2 built offline", steps=40, learning_rate=2e-3),
    "smollm2": DemoPolicy(
        "SmolLM2-135M-Instruct, a real instruct model (lightning-otel model smollm2)",
        steps=20,
        learning_rate=2e-5,
        temperature=0.7,  # at 1.0 the 4-bit model's replies are mostly noise; at 0.7 half of them hold the word
        prompt_length=96,
        say_word=True,
    ),
}


def demo_config(model: Path, steps: int, work: Path, policy: DemoPolicy = POLICIES["tiny"]) -> dict[str, Any]:
    prompt = policy.prompt_length
    return {
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": 4, "max_prompt_length": prompt, "max_response_length": 12, "seed": 1},
        "actor_rollout_ref": {
            "model": {"path": str(model)},
            "rollout": {"n": 4, "temperature": policy.temperature, "log_prob_micro_batch_size_per_gpu": 16},
            "actor": {
                "ppo_mini_batch_size": 4,
                "ppo_micro_batch_size_per_gpu": 16,
                "optim": {"lr": policy.learning_rate},
            },
        },
        "trainer": {
            "total_epochs": 1000,  # bounded by total_training_steps
            "total_training_steps": steps,
            "val_before_train": False,
            "test_freq": -1,
            "save_freq": -1,
            "project_name": "lightning-otel-demo",
            "experiment_name": "capitals",
            "logger": ["console"],  # the training loop's progress: one line (a bar on a terminal) a step
            "default_local_dir": str(work / "checkpoints"),
        },
    }


def write_reward_curve(rewards: list[float], path: Path) -> Path:
    from lightning_otel.runs.reward_curve import write_reward_curve as draw

    return draw(rewards, path, title="lightning-otel demo: VERL on CPU", ylabel="reward (capital-letter share)")


JUDGED_FROM_STEPS = 20  # fewer steps are a smoke run: their curve says nothing
MIN_RISE = 0.05  # last quarter's mean reward over the first quarter's (seeded runs rise by ~0.17)


def run_train_demo(
    *, steps: int | None = None, workdir: str | Path = "agl-demo", runners: int = 2, verbose: bool = False,
    max_staleness: int = 0, model: str = "tiny", capture_content: bool = True, program: str = "lightning-otel",
) -> int:  # fmt: skip
    try:
        import torch  # noqa: F401
        import verl  # noqa: F401
    except ImportError as exc:
        print(f"lightning-otel demo needs the [demo] extra (verl, torch): pip install -e '.[demo]' ({exc})")
        return 2
    from lightning_otel.collector.server import EmbeddedCollector
    from lightning_otel.models.named import model_folder
    from lightning_otel.testing import save_tiny_model

    policy = POLICIES[model]
    steps = steps or policy.steps
    shown = Path(workdir)  # as the user wrote it: the commands printed below work from here
    work = shown.resolve()
    work.mkdir(parents=True, exist_ok=True)
    store, log = work / "collector.sqlite3", shown / "demo.log"
    folder = (work / "model") if model == "tiny" else model_folder(model)  # a real model: built once, said
    shown_folder = shown / "model" if model == "tiny" else folder
    mode = f", asynchronous (max_staleness={max_staleness})" if max_staleness else ""
    print(f"lightning-otel demo: {steps} GRPO steps on CPU{mode}; policy: {policy.description} ({shown_folder})")
    reward = ("mean of the capital-letter share and saying the word" if policy.say_word
              else "capital-letter share")  # fmt: skip
    print(f"task: write answers in capital letters (reward = {reward}); agents `write` and `check`, "
          "agent_match='write'")  # fmt: skip
    if not verbose:
        print(f"other libraries' output (Ray, verl, torch, the runners): {log}  (-v shows it here)", flush=True)
    started = time.monotonic()
    with lightning_otel.quiet(log, verbose=verbose):
        if model == "tiny" and not (folder / "config.json").exists():
            save_tiny_model(folder)
        with EmbeddedCollector.on_sqlite_file(store, fresh=True) as addresses:  # each demo run starts empty
            trainer = lightning_otel.Trainer(
                n_runners=runners,
                algorithm=lightning_otel.VERL(
                    demo_config(folder, steps, work, policy),
                    lightning_otel.TrainingOptions(max_staleness=max_staleness),
                    device="cpu",
                ),
                adapter={"agent_match": "write"},
                initial_resources={"main_llm": lightning_otel.LLM("http://replaced-by-the-gateway/v1", "policy")},
                collector=addresses.query,
                # the messages too: exported rows and pairs carry the text
                runner_options=lightning_otel.RunnerOptions(capture_content=capture_content),
            )
            result = trainer.fit(shout_rollout, [{**task, "say_word": policy.say_word} for task in TASKS])
    rewards = result.rewards()
    try:
        write_reward_curve(rewards, work / "reward_curve.png")
        curve: Path | str = shown / "reward_curve.png"
    except ImportError:  # the [demo] extra brings matplotlib; the run itself does not need it
        curve = "not drawn (pip install matplotlib)"
    quarter, first, last = quarter_means(rewards)
    print(f"\nreward: first {quarter} steps {first:.3f} -> last {quarter} steps {last:.3f}; curve {curve}; "
          f"{time.monotonic() - started:.0f} s")  # fmt: skip
    ui = f"{program} ui {shown / 'collector.sqlite3'} --tokenizer {shown_folder}"
    print(f"see what the trainer saw (runs, steps, span trees, trained tokens): {ui}  (http://127.0.0.1:16687/ui)")
    failed, verdict = rise_verdict(rewards)
    if failed:  # the demo exists to show learning: a flat curve is a failure, said so
        print(f"lightning-otel demo: FAILED: {verdict}; see {log}", file=sys.stderr)
        return 1
    if verdict:
        print(verdict)
    return 0


def quarter_means(rewards: list[float]) -> tuple[int, float, float]:
    """(n, mean of the first n rewards, mean of the last n), n a quarter of the steps (at least one)."""
    quarter = max(1, len(rewards) // 4)
    return quarter, statistics.fmean(rewards[:quarter]), statistics.fmean(rewards[-quarter:])


def rise_verdict(rewards: list[float]) -> tuple[bool, str]:
    """(failed, what to say): a run of `JUDGED_FROM_STEPS` or more fails unless its last quarter's mean reward is
    `MIN_RISE` above its first quarter's; a shorter one is a smoke run, not judged."""
    if len(rewards) < JUDGED_FROM_STEPS:
        return False, f"({len(rewards)} steps: too few to judge the rise; {JUDGED_FROM_STEPS} or more are)"
    _, first, last = quarter_means(rewards)
    if last < first + MIN_RISE:
        return True, f"the reward did not rise by {MIN_RISE} ({first:.3f} -> {last:.3f} over {len(rewards)} steps)"
    return False, ""


def main() -> None:
    sys.exit(run_train_demo())


if __name__ == "__main__":
    main()
