"""Per-call credit: `AnchorAdvantage`, GRPO's rollout advantage plus a step advantage inside anchor states (GiGPO,
arXiv 2505.10978), computed from the traces for any framework.

    VERL(config, advantage="anchor")                         # or Tinker(engine, advantage="anchor")
    Tinker(engine, estimator=AnchorAdvantage(step_weight=1.0, gamma=0.9, anchor_key=strip_timestamps))

For every selected call (a sample): `A = A_rollout + step_weight * A_step`, where `A_rollout` is GRPO's over the
task's rollouts on their episode returns and `A_step` compares the call's return with the other calls of the task's
rollouts that saw the same new input from the same agent (its anchor state), leave-one-out. The rules, in one place
shared with the rollout view: `lightning_otel.adapters.credit`. `anchor_key(agent, new_input_token_ids)` may map
the new input to any hashable first (e.g. to drop a timestamp). Each sample's `credit` keeps the parts; the step's
metrics say the anchor coverage (share of samples in a group of two or more: what the step advantage can act on).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from lightning_otel.adapters.credit import AnchorKey, CreditInput, CreditSettings, assign_credit
from lightning_otel.training.loop.advantages import AdvantageEstimator, GroupAdvantage
from lightning_otel.training.loop.samples import Sample


class AnchorAdvantage(AdvantageEstimator):
    """See the module docstring. `normalize_by_std`, `lone`, `negative_weight`: as `GroupAdvantage`'s;
    `step_normalize_by_std` (default: as `normalize_by_std`) divides the step advantage by its group's return std;
    `gamma` discounts the rewards of later calls in a call's return; `step_weight` is GiGPO's omega."""

    def __init__(
        self,
        *,
        step_weight: float = 1.0,
        gamma: float = 1.0,
        normalize_by_std: bool = True,
        step_normalize_by_std: bool | None = None,
        lone: Literal["reward", "zero"] = "reward",
        negative_weight: float = 1.0,
        anchor_key: AnchorKey | None = None,
        epsilon: float = 1e-6,
    ) -> None:
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {gamma!r}")
        if step_weight < 0:
            raise ValueError(f"step_weight must be >= 0, got {step_weight!r}")
        if not 0.0 <= negative_weight <= 1.0:
            raise ValueError(f"negative_advantage_weight must be in [0, 1], got {negative_weight!r}")
        self.settings = CreditSettings(
            mode="anchor", step_weight=step_weight, gamma=gamma, normalize_by_std=normalize_by_std,
            step_normalize_by_std=normalize_by_std if step_normalize_by_std is None else step_normalize_by_std,
            lone=lone, negative_weight=negative_weight, epsilon=epsilon,
        )  # fmt: skip
        self.anchor_key = anchor_key

    @classmethod
    def like(cls, base: GroupAdvantage, **options: Any) -> AnchorAdvantage:
        """The anchor estimator with a backend's GRPO settings (normalisation, lone groups, negative weight)."""
        defaults = {"normalize_by_std": base.normalize_by_std, "lone": base.lone,
                    "negative_weight": base.negative_weight, "epsilon": base.epsilon}  # fmt: skip
        return cls(**{**defaults, **options})

    def describe(self) -> dict[str, Any]:
        settings = self.settings
        return {"advantage": "anchor", "step_weight": settings.step_weight, "gamma": settings.gamma,
                "normalize_by_std": settings.normalize_by_std,
                "step_normalize_by_std": settings.step_normalize_by_std, "lone": settings.lone,
                "negative_weight": settings.negative_weight,
                "anchor_key": getattr(self.anchor_key, "__qualname__", None)}  # fmt: skip

    def assign(self, samples: Sequence[Sample], rewards: Mapping[str, float] | None = None) -> dict[str, float]:
        items = [
            CreditInput(sample.group, sample.rollout_id, sample.reward, sample.step_rewards_total, sample.triplet)
            for sample in samples
        ]
        credits = assign_credit(items, self.settings, self.anchor_key)
        for sample, credit in zip(samples, credits, strict=True):
            sample.advantage, sample.credit = credit.advantage, credit
        anchored = [credit for credit in credits if credit.anchor_size > 1]
        values = [abs(credit.advantage) for credit in credits]
        return {
            "training/advantage_abs_mean": statistics.fmean(values) if values else math.nan,
            "training/samples_with_advantage": float(sum(1 for value in values if value != 0)),
            "credit/anchor_coverage": len(anchored) / len(credits) if credits else math.nan,
            "credit/anchor_groups": float(len({credit.anchor for credit in anchored})),
            "credit/step_advantage_abs_mean": statistics.fmean(abs(c.step_advantage) for c in credits)
            if credits
            else math.nan,
            "credit/return_mean": statistics.fmean(c.call_return for c in credits) if credits else math.nan,
        }

    def nothing_to_learn(self, samples: Sequence[Sample]) -> str:
        return (
            "no sample has a non-zero advantage: every group's episode returns were equal and so were the returns "
            "of every anchor state's calls, so the policy cannot learn from this step"
        )


def advantage_estimator(advantage: str | AdvantageEstimator, base: GroupAdvantage) -> AdvantageEstimator:
    """`advantage="grpo"` (the backend's GRPO, `base`), `"anchor"` (`AnchorAdvantage` with base's settings), or an
    estimator of the user's own."""
    if isinstance(advantage, AdvantageEstimator):
        return advantage
    if advantage == "grpo":
        return base
    if advantage == "anchor":
        return AnchorAdvantage.like(base)
    raise ValueError(f"advantage must be 'grpo', 'anchor' or an AdvantageEstimator, got {advantage!r}")
