"""Advantage estimators: how the loop turns a step's rewards into what each sample is trained with.

An estimator sets `Sample.advantage` (policy-gradient losses) or `Sample.weight` (supervised losses) on every
sample of a step. The loop then knows, before any compute, whether the step can move the policy: a step trains
only if some sample has a non-zero advantage (or a non-zero weight); otherwise it is skipped, with the estimator's
reason (`nothing_to_learn`).

- `GroupAdvantage`: GRPO. The group's mean reward is the baseline, optionally divided by the group's standard
  deviation; `per="rollout"` counts each rollout once in its group whatever its number of samples (a rollout with
  three selected calls does not pull the baseline three times), `per="row"` counts every sample (verl's own GRPO).
- `BackendAdvantage`: the backend computes advantages itself (verl's other `adv_estimator`s: GAE with a critic,
  RLOO, REINFORCE++, ...); the loop leaves `advantage` None.
- `RewardThreshold`: supervised fine-tuning on the calls of rollouts that scored at least `min_reward` (SFT).
- `UniformWeight`: supervised on every sample (Tinker's `cross_entropy` loss).
- `AnchorAdvantage` (`credit.py`): per-call credit, GRPO's rollout advantage plus a step advantage within anchor
  states.
"""

from __future__ import annotations

import abc
import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar, Literal

from lightning_otel.adapters.credit import group_advantages
from lightning_otel.training.loop.samples import Sample

__all__ = [
    "AdvantageEstimator",
    "BackendAdvantage",
    "GroupAdvantage",
    "RewardThreshold",
    "UniformWeight",
    "group_advantages",
    "moves_policy",
]


class AdvantageEstimator(abc.ABC):
    learns_from: ClassVar[Literal["advantage", "weight"]] = "advantage"

    @abc.abstractmethod
    def assign(self, samples: Sequence[Sample], rewards: Mapping[str, float] | None = None) -> dict[str, float]:
        """Set each sample's advantage (or weight); return metrics of the estimate. `rewards`: the final reward of
        every rewarded rollout of the step (those that gave no sample too)."""

    def nothing_to_learn(self, samples: Sequence[Sample]) -> str:
        """Why no sample can move the policy (called when none can)."""
        return "no sample has a non-zero advantage"

    def describe(self) -> dict[str, Any] | None:
        """The settings the rollout view needs to recompute the advantages (recorded on the run's rollouts); None:
        the view shows none."""
        return None


def moves_policy(samples: Sequence[Sample], learns_from: str) -> bool:
    """Whether training on these samples can change the weights (None: the backend estimates; it may)."""
    if learns_from == "weight":
        return any(sample.weight != 0 for sample in samples)
    return any(sample.advantage is None or sample.advantage != 0 or any(sample.token_advantages or ())
               for sample in samples)  # fmt: skip


class GroupAdvantage(AdvantageEstimator):
    """GRPO's group-relative advantage (see the module docstring). `negative_weight` multiplies negative advantages
    (1: GRPO's own update; 0: only better-than-the-group rollouts are reinforced)."""

    def __init__(
        self,
        *,
        per: Literal["rollout", "row"] = "rollout",
        normalize_by_std: bool = True,
        negative_weight: float = 1.0,
        lone: Literal["reward", "zero"] = "reward",
        epsilon: float = 1e-6,
    ) -> None:
        if per not in ("rollout", "row"):
            raise ValueError(f"per must be 'rollout' or 'row', got {per!r}")
        if not 0.0 <= negative_weight <= 1.0:
            raise ValueError(f"negative_advantage_weight must be in [0, 1], got {negative_weight!r}")
        self.per, self.normalize_by_std, self.negative_weight = per, normalize_by_std, negative_weight
        self.lone, self.epsilon = lone, epsilon

    def describe(self) -> dict[str, Any]:
        return {"advantage": "grpo", "per": self.per, "normalize_by_std": self.normalize_by_std,
                "negative_weight": self.negative_weight, "lone": self.lone}  # fmt: skip

    def assign(self, samples: Sequence[Sample], rewards: Mapping[str, float] | None = None) -> dict[str, float]:
        if self.per == "row":
            keys: list[Hashable] = list(range(len(samples)))
        else:
            keys = [(sample.group, sample.rollout_id) for sample in samples]
        rewards = {key: sample.reward for key, sample in zip(keys, samples, strict=True)}
        group_of = {key: sample.group for key, sample in zip(keys, samples, strict=True)}
        advantages = group_advantages(
            rewards, group_of, normalize_by_std=self.normalize_by_std, lone=self.lone, epsilon=self.epsilon
        )
        for key, sample in zip(keys, samples, strict=True):
            advantage = advantages[key]
            sample.advantage = advantage * self.negative_weight if advantage < 0 else advantage
        values = [abs(sample.advantage or 0.0) for sample in samples]
        return {
            "training/advantage_abs_mean": statistics.fmean(values) if values else math.nan,
            "training/samples_with_advantage": float(sum(1 for value in values if value != 0)),
        }

    def nothing_to_learn(self, samples: Sequence[Sample]) -> str:
        groups: dict[str, set[float]] = {}
        for sample in samples:
            groups.setdefault(sample.group, set()).add(sample.reward)
        equal = sum(1 for rewards in groups.values() if len(rewards) == 1)
        said = (
            f"every group's rewards were equal ({equal} of {len(groups)} groups), so no sample has an advantage"
            if equal == len(groups)
            else "no sample has a non-zero advantage"
        )
        if self.negative_weight == 0.0 and equal < len(groups):
            said += " above its group's mean (negative_advantage_weight=0)"
        return said + ": the policy cannot learn from this step (a reward that varies between attempts of a task does)"


class BackendAdvantage(AdvantageEstimator):
    """The backend's own estimator computes the advantages (e.g. verl's `algorithm.adv_estimator`)."""

    def assign(self, samples: Sequence[Sample], rewards: Mapping[str, float] | None = None) -> dict[str, float]:
        for sample in samples:
            sample.advantage = None
        return {}


class RewardThreshold(AdvantageEstimator):
    """Supervised: weight 1 for the samples of rollouts with reward >= `min_reward`, 0 for the others."""

    learns_from: ClassVar[Literal["advantage", "weight"]] = "weight"

    def __init__(self, min_reward: float) -> None:
        self.min_reward = min_reward

    def assign(self, samples: Sequence[Sample], rewards: Mapping[str, float] | None = None) -> dict[str, float]:
        for sample in samples:
            sample.weight = 1.0 if sample.reward >= self.min_reward else 0.0
        reached = [reward for reward in (rewards or {}).values() if reward >= self.min_reward]
        return {
            "training/samples_with_weight": float(sum(1 for sample in samples if sample.weight)),
            "training/rollouts_kept": float(len(reached)),
        }

    def nothing_to_learn(self, samples: Sequence[Sample]) -> str:
        best = max((sample.reward for sample in samples), default=math.nan)
        return f"no rollout reached min_reward={self.min_reward} (the best reward was {best:.3g})"


class UniformWeight(AdvantageEstimator):
    """Supervised on every sample (weight 1), whatever its reward."""

    learns_from: ClassVar[Literal["advantage", "weight"]] = "weight"

    def assign(self, samples: Sequence[Sample], rewards: Mapping[str, float] | None = None) -> dict[str, float]:
        for sample in samples:
            sample.weight = 1.0
        return {"training/samples_with_weight": float(len(samples))}
