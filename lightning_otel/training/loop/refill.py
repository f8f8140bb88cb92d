"""Refilled groups: a step's group whose rewards all tie (every rollout of a task won, or every one lost) teaches
GRPO nothing; rather than train on fewer groups, the step draws further tasks of the training set until it holds as
many groups whose rewards differ as it has tasks, within a bound (`TrainingOptions.refill_tied_groups`: at most
that many times the step's tasks more). What the field does for small models: verl's DAPO `filter_groups`, bounded
by `max_num_gen_batches`; prime-rl's difficulty pools.

Tasks are drawn from a shuffled order of the training set, never one of the step's own; a task's running pass rate
(its groups' mean rewards so far) is kept, and a task known to tie (every group so far all won or all lost) is drawn
only when no other is left. The tied groups stay in the step (an estimator with per-call credit may still learn
from them); the step's metrics say how many tasks were drawn, and how many groups tied.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_otel.runtime.rollout_batch import BatchResult, RolloutBatch


def group_rewards(batch: BatchResult) -> dict[str, list[float]]:
    """Each group's rewards (rollouts with a reward), groups in the order they were queued."""
    rewards = batch.rewards()
    grouped: dict[str, list[float]] = {record["group_id"]: [] for record in batch.batch.records}
    for record in batch.rollouts:
        reward = rewards.get(record["rollout_id"])
        if reward is not None:
            grouped.setdefault(record["group_id"], []).append(float(reward))
    return grouped


def informative(rewards: Sequence[float]) -> bool:
    """A group GRPO learns from: at least two rewards, not all equal."""
    return len(rewards) >= 2 and max(rewards) > min(rewards)


def merged(first: BatchResult, more: BatchResult) -> BatchResult:
    """One step's batch from its first rollouts and a refill's."""
    batch = RolloutBatch(first.batch.batch_id, first.batch.mode, [*first.batch.rollout_ids, *more.batch.rollout_ids],
                         [*first.batch.records, *more.batch.records])  # fmt: skip
    calls = None
    if first.gateway_calls is not None or more.gateway_calls is not None:
        calls = (first.gateway_calls or 0) + (more.gateway_calls or 0)
    return BatchResult(batch, [*first.rollouts, *more.rollouts], {**first.spans, **more.spans},
                       {**first.adapted, **more.adapted}, first.wall_s + more.wall_s, first.wait_s + more.wait_s,
                       {**first.incomplete, **more.incomplete}, calls)  # fmt: skip


@dataclass
class TaskPool:
    """The training set's tasks in a shuffled order, drawn from in turn; each task's pass rate so far."""

    tasks: Sequence[Any]
    seed: int = 0
    order: list[int] = field(init=False)
    position: int = 0
    seen: dict[int, list[tuple[float, bool]]] = field(default_factory=dict)  # task -> (mean reward, tied) a group

    def __post_init__(self) -> None:
        self.order = list(range(len(self.tasks)))
        random.Random(self.seed).shuffle(self.order)
        self._index = {id(task): index for index, task in enumerate(self.tasks)}

    def index_of(self, task: Any) -> int | None:
        return self._index.get(id(task))

    def ties(self, index: int) -> bool:
        """Known to tie: every group of it so far had equal rewards."""
        groups = self.seen.get(index)
        return bool(groups) and all(tied for _, tied in groups)

    def pass_rate(self, index: int) -> float | None:
        """Its groups' mean reward so far (None: not run yet)."""
        groups = self.seen.get(index)
        return sum(mean for mean, _ in groups) / len(groups) if groups else None

    def draw(self, n: int, exclude: set[int]) -> list[int]:
        """`n` task indices (fewer when the set runs out), none of `exclude`; those not known to tie first."""
        candidates = [self.order[(self.position + k) % len(self.order)] for k in range(len(self.order))]
        candidates = [index for index in candidates if index not in exclude]
        chosen = [index for index in candidates if not self.ties(index)][:n]
        chosen += [index for index in candidates if index not in chosen][: n - len(chosen)]
        if chosen:
            self.position = (self.order.index(chosen[-1]) + 1) % len(self.order)
        return chosen

    def record(self, index: int, rewards: Sequence[float]) -> None:
        if rewards:
            self.seen.setdefault(index, []).append((sum(rewards) / len(rewards), not informative(rewards)))


def refill(
    batch: BatchResult, step_tasks: Sequence[Any], pool: TaskPool, factor: float,
    run_more: Callable[[list[Any]], BatchResult],
) -> tuple[BatchResult, dict[str, float]]:  # fmt: skip
    """`batch` (the step's rollouts of `step_tasks`) with groups of further tasks (`run_more(tasks)` runs them as the
    step's) until as many groups differ as the step has tasks, drawing at most `factor` x its tasks more."""
    tasks_of = {group: step_tasks[k] for k, group in enumerate(group_rewards(batch)) if k < len(step_tasks)}
    step_indices = {index for task in step_tasks if (index := pool.index_of(task)) is not None}
    _record(pool, batch, tasks_of)
    budget, drawn = int(factor * len(step_tasks)), 0
    while True:
        groups = group_rewards(batch)
        missing = len(step_tasks) - sum(informative(rewards) for rewards in groups.values())
        if missing <= 0 or drawn >= budget:
            break
        indices = pool.draw(min(missing, budget - drawn), step_indices)
        if not indices:
            break
        extra = [pool.tasks[index] for index in indices]
        more = run_more(extra)
        tasks_of.update({group: extra[k] for k, group in enumerate(group_rewards(more)) if k < len(extra)})
        _record(pool, more, tasks_of)
        step_indices.update(indices)
        drawn += len(indices)
        batch = merged(batch, more)
    groups = group_rewards(batch)
    tied = sum(not informative(rewards) for rewards in groups.values())
    metrics = {"refill/tasks_drawn": float(drawn), "refill/groups": float(len(groups)),
               "refill/tied_groups": float(tied), "refill/informative_groups": float(len(groups) - tied)}  # fmt: skip
    return batch, metrics


def _record(pool: TaskPool, batch: BatchResult, tasks_of: dict[str, Any]) -> None:
    for group, rewards in group_rewards(batch).items():
        task = tasks_of.get(group)
        index = pool.index_of(task) if task is not None else None
        if index is not None:
            pool.record(index, rewards)


__all__ = ["TaskPool", "group_rewards", "informative", "merged", "refill"]
