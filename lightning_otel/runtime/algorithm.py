"""The interface between a training algorithm (the loop's backends, APO, yours) and the rollout machinery.

An algorithm gets a `TrainingRun` and drives it in batches:

    class MyAlgorithm(lightning_otel.Algorithm):
        def run(self, run, train_dataset, val_dataset):
            for step, tasks in enumerate(batches(train_dataset, 32)):
                batch = run.submit(tasks, n=8)                 # 8 rollouts per task, one group per task
                result = run.collect(batch)                     # event-driven wait, spans in one call, adapted
                for (group_id, agent), triplets in result.groups(by_agent=True).items():
                    ...                                         # prompt/response token ids, logprobs, rewards
                run.update_resources({"main_llm": new_llm})    # runners pick up the new version on their next claim

`Baseline` runs the agent without training (what `Trainer.dev` prints).
"""

from __future__ import annotations

import abc
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lightning_otel.runtime.rollout_batch import BatchResult
from lightning_otel.runtime.training_run import TrainingRun


class Algorithm(abc.ABC):
    """A training algorithm: drives a `TrainingRun` over the datasets; what it returns, `Trainer.fit` returns."""

    # True when it learns from message content (SFT): the Trainer's runners then record it on LLM spans.
    needs_message_content: ClassVar[bool] = False
    # True when it shows its own progress (the training loop's step bar): the Trainer then shows no batch bar.
    shows_progress: ClassVar[bool] = False
    # True when it takes `agent_match` as a mapping of agents to policies (a policy per agent: Tinker; Baseline,
    # which trains none); the Trainer refuses the mapping otherwise, in one line, before anything starts.
    policy_per_agent: bool = False

    @abc.abstractmethod
    def run(self, run: TrainingRun, train_dataset: Sequence[Any] | None, val_dataset: Sequence[Any] | None) -> Any: ...


@dataclass(slots=True)
class BaselineResult:
    """What Baseline measured: per-batch metrics and every batch's result (for inspection and tests)."""

    train: list[BatchResult] = field(default_factory=list)
    val: list[BatchResult] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        def mean_reward(results: list[BatchResult]) -> float:
            rewards = [r for result in results for r in result.rewards().values() if r is not None]
            return statistics.fmean(rewards) if rewards else float("nan")

        return {
            "train/reward_mean": mean_reward(self.train),
            "val/reward_mean": mean_reward(self.val),
            "train/rollouts": sum(len(result.rollouts) for result in self.train),
            "train/triplets": sum(len(result.triplets()) for result in self.train),
        }


class Baseline(Algorithm):
    """Runs the agent without training: rewards, triplets and diagnostics per batch, as a trainer would see them.

    Use it to check an agent and its `agent_match` before spending GPU hours (`Trainer.dev` runs it on a few
    tasks and prints everything), or as the reference a trained policy is compared with. `metadata`: recorded on
    every rollout it queues (a `note` the rollout view shows; the `training` settings of a run it stands in for).
    """

    policy_per_agent = True  # trains nothing: a dry run shows which policy each sample would train

    def __init__(
        self,
        *,
        batch_size: int = 16,
        n_rollouts: int = 1,
        n_epochs: int = 1,
        max_tasks: int | None = None,
        on_batch: Callable[[str, int, BatchResult], None] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.metadata = dict(metadata or {})
        self.batch_size = batch_size
        self.n_rollouts = n_rollouts
        self.n_epochs = n_epochs
        self.max_tasks = max_tasks
        self.on_batch = on_batch

    def run(
        self, run: TrainingRun, train_dataset: Sequence[Any] | None, val_dataset: Sequence[Any] | None
    ) -> BaselineResult:
        result = BaselineResult()
        for _ in range(self.n_epochs if train_dataset else 0):
            for tasks in self._batches(train_dataset or []):
                batch = run.run_batch(tasks, n=self.n_rollouts, mode="train", metadata=self.metadata)
                result.train.append(batch)
                if self.on_batch is not None:
                    self.on_batch("train", len(result.train), batch)
        for step, tasks in enumerate(self._batches(val_dataset or [])):
            batch = run.run_batch(tasks, n=1, mode="val", metadata=self.metadata)
            result.val.append(batch)
            if self.on_batch is not None:
                self.on_batch("val", step + 1, batch)
        return result

    def _batches(self, dataset: Sequence[Any]) -> list[list[Any]]:
        tasks = list(dataset)[: self.max_tasks] if self.max_tasks else list(dataset)
        return [tasks[start : start + self.batch_size] for start in range(0, len(tasks), self.batch_size)]
