"""What the loop says of a step and of a run: the asynchronous, per-policy and staleness metrics of a step, each
task's mean reward, which agents are trained without agent_match, the time budget's word on another step, and the one
message of a run that trained nothing."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence

from lightning_otel.runtime.rollout_batch import BatchResult
from lightning_otel.runtime.sample_diagnosis import NothingTrained
from lightning_otel.training.loop.result import StepRecord
from lightning_otel.training.loop.samples import Sample
from lightning_otel.training.loop.staleness import Taken

log = logging.getLogger("lightning_otel.training")


def async_metrics(taken: Taken) -> dict[str, float]:
    return {
        "async/dropped_stale_groups": float(taken.dropped_stale),
        "async/carried_over_groups": float(taken.carried_over),
        "async/wait_s": taken.waited_s,
    }


def policy_metrics(policies: Sequence[str], samples: Sequence[Sample]) -> dict[str, float]:
    """Per policy: its samples this step, their mean reward and mean |advantage| (NaN without samples)."""
    metrics: dict[str, float] = {}
    for policy in policies:
        mine = [s for s in samples if s.triplet is not None and s.triplet.policy == policy]
        metrics[f"policy/{policy}/samples"] = float(len(mine))
        metrics[f"policy/{policy}/reward_mean"] = sum(s.reward for s in mine) / len(mine) if mine else math.nan
        advantages = [abs(s.advantage) for s in mine if s.advantage is not None]
        metrics[f"policy/{policy}/advantage_abs_mean"] = sum(advantages) / len(advantages) if advantages else math.nan
    return metrics


def staleness_histogram(samples: Sequence[Sample]) -> dict[str, float]:
    counts: dict[int, int] = {}
    for sample in samples:
        counts[sample.staleness] = counts.get(sample.staleness, 0) + 1
    metrics = {f"async/staleness_{k}": float(n) for k, n in sorted(counts.items())}
    if samples:
        metrics["async/staleness_mean"] = sum(k * n for k, n in counts.items()) / len(samples)
        metrics["async/staleness_max"] = float(max(counts))
    return metrics


class TimeBudget:
    """`Schedule.max_seconds`: no step starts that would, at the steps' mean pace so far, end past the budget
    (counted from the first step's start; the last validation and checkpoint come after it)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.began = time.monotonic()
        self.steps: list[float] = []

    def allows_another(self, step_seconds: float) -> bool:
        self.steps.append(step_seconds)
        if self.seconds is None:
            return True
        return time.monotonic() - self.began + sum(self.steps) / len(self.steps) <= self.seconds

    def said(self) -> str:
        used, pace = time.monotonic() - self.began, sum(self.steps) / max(len(self.steps), 1)
        return f"{used:.0f} s of {self.seconds:.0f} s used, a step takes {pace:.0f} s"


def task_means(batch: BatchResult, rewards: Mapping[str, float]) -> list[float]:
    """Each task's mean reward over its rewarded rollouts (a group is one task of one batch), in queue order; a task
    none of whose rollouts has a reward is left out."""
    by_group: dict[str, list[float]] = {}
    for record in batch.rollouts:
        if record["rollout_id"] in rewards:
            by_group.setdefault(record["group_id"], []).append(rewards[record["rollout_id"]])
    return [sum(values) / len(values) for values in by_group.values()]


def step_note(record: StepRecord) -> str:
    return ("skipped: " + "; ".join(record.skipped_because)) if record.skipped_because else ""


def nothing_trained_summary(steps: Sequence[StepRecord]) -> str:
    """One message for a run in which no step trained: what the steps saw, and the first step's reasons."""

    def total(key: str) -> int:
        return int(sum(record.metrics.get(key, 0.0) for record in steps))

    first = steps[0]
    failed = total("rollout/failed") + total("rollout/timeout") + total("rollout/cancelled")
    return (
        f"no training step of {len(steps)} had a trainable sample (none trained: {total('rollout/rollouts')} "
        f"rollouts ({failed} failed), {total('training/samples')} samples selected, "
        f"{total('rollout/zero_variance_groups')} groups whose rewards were all equal, "
        f"{total('rollout/calls_without_token_ids')} calls without token ids). Step {first.step}: "
        + "; ".join(first.skipped_because)
        + ". Check agent_match with Trainer.dev, and a reward that varies between attempts of a task"
    )


def say_agents_trained(agent_match: object, record: StepRecord) -> bool:
    """No agent_match and the calls of several agents selected: said, naming them (each is trained). Returns whether
    the run's samples were seen, so the loop says it once."""
    if agent_match is not None or not record.sample_agents:
        return False
    if len(record.sample_agents) > 1:
        names = ", ".join(f"{name or '(unnamed)'} ({count})" for name, count in sorted(record.sample_agents.items()))
        log.warning("no agent_match: the calls of every agent are trained: %s (samples of step %d); set "
                    "agent_match (--agent-match) to train some of them", names, record.step)  # fmt: skip
    return True


def refuse_nothing_trained(steps: Sequence[StepRecord], resumed: int) -> None:
    """A run in which no step trained raises `NothingTrained`. A resumed one only says so: its steps before the
    checkpoint are not in `steps` (the run folder's metrics have them; `lightning-otel train --resume` judges the
    whole run), and a trainer killed near its end may resume for one step whose groups all tie."""
    if not steps or not all(record.skipped_because for record in steps):
        return
    if not resumed:
        raise NothingTrained(nothing_trained_summary(steps))
    log.warning("the %d step(s) since resuming after step %d trained nothing: %s", len(steps), resumed,
                nothing_trained_summary(steps))  # fmt: skip


__all__ = ["TimeBudget", "async_metrics", "nothing_trained_summary", "policy_metrics", "refuse_nothing_trained",
           "say_agents_trained", "staleness_histogram", "step_note", "task_means"]  # fmt: skip
