"""Supervised fine-tuning from traces: run an agent, keep the rollouts that scored well, fine-tune a model on the
LLM calls they made.

    trainer = lightning_otel.Trainer(
        algorithm=lightning_otel.SFT("path/to/model", "path/to/output", min_reward=1.0),
        adapter={"agent_match": "write"},                                 # which agents' calls become examples
        initial_resources={"main_llm": lightning_otel.LLM(teacher_url, "teacher-model")},
    )
    result = trainer.fit(agent, train_dataset)              # -> TrainingResult (its final: sft/...); model in output

Rejection sampling in Agent Lightning's sense, on the training loop (`lightning_otel.training.loop`) with a
supervised backend: the agent runs against `main_llm` (a stronger teacher, or the policy itself; the loop serves no
policy of its own), the schedule's `batch_size` tasks a step (64); every call `agent_match` selects in a rollout with
reward >= `min_reward` becomes one chat example (`TraceToMessages`: the call's input messages, its reply as the
completion; weight 1, the others 0), and after the last step TRL's `SFTTrainer` trains on the replies only. A step
with no rollout at `min_reward` is a skipped step, said so; a run with none raises `NoDemonstrations` (a
`NothingTrained`). The examples are kept as JSONL beside the model. `fine_tune(examples, ...)` is the second half on
its own (examples from stored traces, for instance). The runners must record message content: the Trainer turns it on
for this algorithm. Needs the `[sft]` extra (trl, datasets, torch).
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from lightning_otel.adapters.messages import TraceToMessages
from lightning_otel.runtime.algorithm import Algorithm
from lightning_otel.runtime.sample_diagnosis import NothingTrained
from lightning_otel.runtime.training_run import TrainingRun
from lightning_otel.training.loop.advantages import AdvantageEstimator, RewardThreshold
from lightning_otel.training.loop.backend import Backend
from lightning_otel.training.loop.loop import TrainingLoop
from lightning_otel.training.loop.options import TrainingOptions
from lightning_otel.training.loop.result import TrainingResult
from lightning_otel.training.loop.samples import Sample
from lightning_otel.training.loop.schedule import Schedule
from lightning_otel.training.trl_device import trl_device_options

log = logging.getLogger("lightning_otel.sft")

EXAMPLES_FILE = "sft_examples.jsonl"


class NoDemonstrations(NothingTrained):
    """No rollout gave a usable example: nothing to fine-tune on."""


def prompt_completion(example: dict[str, Any]) -> dict[str, Any]:
    """`{"messages": [..., reply], "tools": [...]}` -> TRL's conversational prompt-completion row (loss on the reply
    only). The tools go as JSON text, which TRL reads back: the chat template renders them as the rollout's request
    gave them (a column of dicts would be unified by Arrow, every tool given every other tool's fields)."""
    messages = example["messages"]
    tools = example.get("tools")
    return {"prompt": messages[:-1], "completion": messages[-1:], "tools": json.dumps(tools) if tools else None}


def fine_tune(
    examples: Sequence[dict[str, Any]],
    model_path: str | Path,
    output_dir: str | Path,
    *,
    epochs: float = 1.0,
    learning_rate: float = 2e-5,
    batch_size: int = 8,
    max_length: int | None = 4096,
    seed: int = 0,
    use_cpu: bool | None = None,
    trl_args: dict[str, Any] | None = None,
    on_log: Callable[[dict[str, float]], None] | None = None,
) -> list[float]:
    """Fine-tune the model at `model_path` on chat examples (`{"messages": [...]}`; the last message is the reply
    trained on) with TRL's SFTTrainer; save model and tokenizer to `output_dir`. Returns the logged losses."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    if not examples:
        raise NoDemonstrations("fine_tune needs at least one example")
    losses: list[float] = []

    class LossLog(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **_: Any) -> None:
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))
                if on_log is not None:
                    on_log(dict(logs, step=float(state.global_step)))

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    cpu = not torch.cuda.is_available() if use_cpu is None else use_cpu
    options: dict[str, Any] = {
        "output_dir": str(output_dir),
        "num_train_epochs": epochs,
        "learning_rate": learning_rate,
        "per_device_train_batch_size": batch_size,
        "max_length": max_length,
        "completion_only_loss": True,
        "seed": seed,
        "logging_steps": 10,
        "save_strategy": "no",
        "report_to": [],
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        **trl_device_options(cpu),
    }
    config = SFTConfig(**{**options, **(trl_args or {})})  # trl_args: any SFTConfig field, last word
    dataset = Dataset.from_list([prompt_completion(example) for example in examples])
    trainer = SFTTrainer(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer, callbacks=[LossLog()]
    )
    trainer.remove_callback(PrinterCallback)  # without tqdm, transformers prints every log line; on_log reports them
    trainer.train()
    trainer.save_model(str(output_dir))
    tokenizer.save_pretrained(str(output_dir))
    return losses


# What `TrainingOptions` fields left unset mean for SFT: 64 tasks a step, each run once, no validation at the start.
DEFAULT_SCHEDULE = Schedule(batch_size=64, group_size=1, val_at_start=False)


class SFT(Algorithm):
    """Fine-tune on the calls of good rollouts (rejection sampling from traces). See the module docstring.

    `options`: the loop's settings (`TrainingOptions`: the schedule's `group_size` rollouts per task, more tries and
    more kept examples with a sampling teacher, `batch_size` tasks at a time; trackers, on_step); `min_reward` the
    reward a rollout needs to be kept; `agent_match`: which calls become examples (default: the trainer's adapter's);
    `fine_tune_args` go to `fine_tune` (epochs, learning_rate, batch_size, on_log, ...). The result's `final` says
    what the run kept and trained: `sft/rollouts`, `sft/kept_rollouts`, `sft/examples`, `sft/teacher_reward_mean`,
    `sft/first_loss`, `sft/last_loss`, `sft/train_seconds`, `sft/calls_without_content`.
    """

    needs_message_content: ClassVar[bool] = True  # the Trainer's runners record message content for it
    shows_progress: ClassVar[bool] = True  # the loop's step bar (trackers' console)

    def __init__(
        self,
        model_path: str | Path,
        output_dir: str | Path,
        options: TrainingOptions | None = None,
        *,
        min_reward: float = 1.0,
        agent_match: str | None = None,
        **fine_tune_args: Any,
    ) -> None:
        self.options = (options or TrainingOptions()).with_defaults(schedule=DEFAULT_SCHEDULE)
        if self.options.advantage != "grpo" or self.options.max_staleness:
            raise ValueError("SFT keeps the calls of rollouts with reward >= min_reward: TrainingOptions.advantage and "
                             "max_staleness do not apply to it")  # fmt: skip
        self.model_path = Path(model_path)
        self.output_dir = Path(output_dir)
        self.min_reward = min_reward
        self.agent_match = agent_match
        self.fine_tune_args = fine_tune_args
        self.backend: SFTBackend | None = None  # the run's, while it runs and after (its examples and losses)

    def run(
        self, run: TrainingRun, train_dataset: Sequence[Any] | None, val_dataset: Sequence[Any] | None
    ) -> TrainingResult:
        tasks = list(train_dataset or [])
        if not tasks:
            raise NoDemonstrations("SFT needs a train_dataset to run the agent on")
        # The same selection as the trainer's adapter unless this algorithm was given its own.
        match = self.agent_match if self.agent_match is not None else getattr(run.adapter, "agent_match", None)
        self.backend = backend = SFTBackend(self.model_path, self.output_dir, self.fine_tune_args, agent_match=match,
                                            min_reward=self.min_reward)  # fmt: skip
        user_on_step = self.options.on_step

        def on_step(step: int, metrics: dict[str, float]) -> None:
            backend.observe(metrics)
            if user_on_step is not None:
                user_on_step(step, metrics)

        options = replace(self.options, on_step=on_step)
        loop = TrainingLoop(backend, options, run_config={"algorithm": "sft", "model": str(self.model_path)})
        try:
            result = loop.run(run, tasks)
        except NothingTrained as nothing:
            raise NoDemonstrations(
                f"{backend.rollouts} rollouts, {backend.kept_rollouts} with reward >= {self.min_reward}, 0 examples "
                f"({backend.calls_without_content} selected calls had no message content; agent_match={match!r}): "
                f"nothing to fine-tune on ({nothing})"
            ) from None
        rewards = [reward for record in result.steps for reward in record.rewards.values()]
        result.final.update({
            "sft/rollouts": float(backend.rollouts),
            "sft/kept_rollouts": float(backend.kept_rollouts),
            "sft/teacher_reward_mean": statistics.fmean(rewards) if rewards else math.nan,
            "sft/calls_without_content": float(backend.calls_without_content),
        })  # fmt: skip
        if backend.calls_without_content:
            log.warning(
                "%d selected LLM calls had no message content and were left out (runners must record content)",
                backend.calls_without_content,
            )
        return result


class SFTBackend(Backend):
    """The loop's supervised backend: each step keeps the chat examples of the samples with weight 1 (rollouts with
    reward >= `min_reward`); after the last step they are written as JSONL and the model is fine-tuned on them
    (`fine_tune`)."""

    name = "sft"
    learns_from_text = True

    def __init__(
        self,
        model_path: Path,
        output_dir: Path,
        fine_tune_args: dict[str, Any],
        *,
        agent_match: str | None,
        min_reward: float = 1.0,
    ) -> None:
        self.model_path, self.output_dir, self.fine_tune_args = model_path, output_dir, fine_tune_args
        self.agent_match, self.min_reward = agent_match, min_reward
        self.examples: list[dict[str, Any]] = []
        self.losses: list[float] = []
        self.train_seconds = 0.0
        self.rollouts = self.kept_rollouts = self.calls_without_content = 0

    def estimator(self, advantage: str | AdvantageEstimator) -> AdvantageEstimator:
        return RewardThreshold(self.min_reward)

    def idle_metrics(self) -> dict[str, float]:
        return {"sft/examples": 0.0}

    def update(self, samples: Sequence[Sample], step: int) -> dict[str, float]:
        kept = [sample.example for sample in samples if sample.weight and sample.example is not None]
        self.examples.extend(kept)
        return {"sft/examples": float(len(kept))}

    def observe(self, metrics: dict[str, float]) -> None:
        """A step's metrics (trained or skipped): the counts the run reports."""
        self.rollouts += int(metrics.get("rollout/rollouts", 0))
        self.kept_rollouts += int(metrics.get("training/rollouts_kept", 0))
        self.calls_without_content += int(metrics.get("rollout/calls_without_content", 0))

    def finish(self) -> dict[str, float]:
        if not self.examples:
            return {}
        import time

        self.output_dir.mkdir(parents=True, exist_ok=True)
        (self.output_dir / EXAMPLES_FILE).write_text(TraceToMessages.to_jsonl(self.examples), encoding="utf-8")
        started = time.monotonic()
        self.losses = fine_tune(self.examples, self.model_path, self.output_dir, **self.fine_tune_args)
        self.train_seconds = time.monotonic() - started
        return {
            "sft/examples": float(len(self.examples)),
            "sft/first_loss": self.losses[0] if self.losses else math.nan,
            "sft/last_loss": self.losses[-1] if self.losses else math.nan,
            "sft/train_seconds": self.train_seconds,
        }


def read_examples(path: str | Path) -> list[dict[str, Any]]:
    """Examples written by an SFT run (or any OpenAI chat fine-tuning JSONL)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]
