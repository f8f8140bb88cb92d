"""What a training returns, whatever its backend: `TrainingResult`, one `StepRecord` per step and per validation.

    result = trainer.fit(agent, train_tasks, val_tasks)     # VERL, Tinker, DPO, SFT or your own TrainingLoop
    result.rewards()                                        # mean training reward per step
    result.validation                                       # [(step, val reward), ...]
    result.sampled_validations                              # the same tasks at the training temperature
    result.steps[-1].metrics["training/policy_version"]     # every metric the step logged (the loop's table)
    result.final                                            # what the backend reported at the end

Every backend's facade returns it: the loop's records are the result, so a script compares backends alike.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class StepRecord:
    step: int
    metrics: dict[str, float]
    sample_response_ids: list[str] = field(default_factory=list)  # the LLM calls that became samples
    sample_agents: dict[str, int] = field(default_factory=dict)  # samples per agent name
    rollout_ids: list[str] = field(default_factory=list)  # the step's rollouts (their traces are in the collector)
    skipped_because: list[str] = field(default_factory=list)  # why the step trained nothing (empty: it trained)
    rewards: dict[str, float] = field(default_factory=dict)  # final reward of each rewarded rollout
    task_rewards: list[float] = field(default_factory=list)  # validation: each task's mean reward over its rollouts
    trained: list[tuple[str, str, int]] = field(default_factory=list)  # (rollout, attempt, policy version) a sample


@dataclass(slots=True)
class TrainingResult:
    steps: list[StepRecord] = field(default_factory=list)
    validations: list[StepRecord] = field(default_factory=list)
    sampled_validations: list[StepRecord] = field(default_factory=list)  # at the training sampling (`val_sampled`)
    checkpoints: list[str] = field(default_factory=list)
    train_seconds: float = 0.0
    final: dict[str, float] = field(default_factory=dict)  # what the backend reported after the last step

    def rewards(self) -> list[float]:
        """Mean training reward per step (NaN where a step had none)."""
        return [record.metrics.get("rollout/reward_mean", math.nan) for record in self.steps]

    @property
    def validation(self) -> list[tuple[int, float]]:
        """(step, mean validation reward) for each validation (step 0: before the first step)."""
        return [(record.step, record.metrics.get("val/reward_mean", math.nan)) for record in self.validations]

    def metrics(self, window: int = 5) -> dict[str, float]:
        """Mean reward over the first and last `window` steps, validation at the start and the end, and how many
        steps trained."""
        rewards = [reward for reward in self.rewards() if not math.isnan(reward)]
        head, tail = rewards[:window], rewards[-window:]
        validation = self.validation
        return {
            "steps": float(len(self.steps)),
            "trained_steps": float(sum(1 for record in self.steps if not record.skipped_because)),
            "reward/first_steps": statistics.fmean(head) if head else math.nan,
            "reward/last_steps": statistics.fmean(tail) if tail else math.nan,
            "val/first": validation[0][1] if validation else math.nan,
            "val/last": validation[-1][1] if validation else math.nan,
            "train_seconds": self.train_seconds,
        }

    def figures(self) -> dict[str, Any]:
        """What a seeded run keeps (JSON-ready): each step's training reward, how many steps trained, the groups
        and those whose rewards were all equal, and each validation's success with its rollout count."""
        return {
            "train_reward": self.rewards(),
            "trained_steps": sum(1 for record in self.steps if not record.skipped_because),
            "zero_variance_groups": sum(record.metrics.get("rollout/zero_variance_groups", 0) for record in self.steps),
            "groups": sum(record.metrics.get("rollout/groups", 0) for record in self.steps),
            "validations": [
                {"step": record.step, "success": record.metrics["val/reward_mean"],
                 "rollouts": int(record.metrics.get("val/with_samples", 0))}
                for record in self.validations
            ],
        }  # fmt: skip


__all__ = ["StepRecord", "TrainingResult"]
