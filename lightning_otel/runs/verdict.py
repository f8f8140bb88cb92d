"""Whether a run learned: the held-out reward before the first step and after the last, with standard errors.

    verdict = Verdict.of(result, temperature=0.7)      # the loop's validations at step 0 and after the last step
    for line in verdict.lines():
        print(line)
    verdict.improved                                   # the run's exit status follows it (0, else 3)

Each validation gives one mean reward per task (greedy: one rollout a task; sampled: the mean of its samples at the
training temperature). A comparison's standard error is that of the difference of two independent means,
sqrt(se_before^2 + se_after^2), with each se the tasks' standard deviation over sqrt(tasks): conservative, as the
same tasks before and after are positively correlated. A change is beyond noise at `NOISE_SE` (2) standard errors.
The policy improved when a comparison rose beyond noise and none fell beyond it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

NOISE_SE = 2.0
IMPROVED, WORSE, WITHIN_NOISE = "improved", "worse", "within noise"


def mean_and_error(values: Sequence[float]) -> tuple[float, float]:
    """(mean, its standard error); NaN for no values, 0 error for one."""
    if not values:
        return math.nan, math.nan
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) / math.sqrt(len(values))) if len(values) > 1 else 0.0


@dataclass(frozen=True, slots=True)
class Comparison:
    """One way of validating (greedy, or sampled), before and after: per-task mean rewards."""

    label: str
    before: tuple[float, ...]
    after: tuple[float, ...]

    @property
    def change(self) -> float:
        return mean_and_error(self.after)[0] - mean_and_error(self.before)[0]

    @property
    def error(self) -> float:
        return math.hypot(mean_and_error(self.before)[1], mean_and_error(self.after)[1])

    @property
    def standard_errors(self) -> float:
        """The change in standard errors (inf: a change with no spread at all; NaN: nothing to compare)."""
        change, error = self.change, self.error
        if math.isnan(change):
            return math.nan
        if error == 0:
            return 0.0 if change == 0 else math.copysign(math.inf, change)
        return change / error

    @property
    def outcome(self) -> str:
        z = self.standard_errors
        if math.isnan(z) or abs(z) <= NOISE_SE:
            return WITHIN_NOISE
        return IMPROVED if z > 0 else WORSE

    def line(self) -> str:
        (before, se_before), (after, se_after) = mean_and_error(self.before), mean_and_error(self.after)
        return (f"{self.label}: {before:.3f} ± {se_before:.3f} -> {after:.3f} ± {se_after:.3f} ({self.change:+.3f}, "
                f"{self.standard_errors:+.1f} SE; {len(self.before)} -> {len(self.after)} tasks): "
                f"{self.outcome}")  # fmt: skip

    def as_json(self) -> dict[str, Any]:
        (before, se_before), (after, se_after) = mean_and_error(self.before), mean_and_error(self.after)
        return {"label": self.label, "before": before, "before_se": se_before, "after": after, "after_se": se_after,
                "change": self.change, "change_se": self.error, "standard_errors": self.standard_errors,
                "outcome": self.outcome, "tasks_before": len(self.before), "tasks_after": len(self.after)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Verdict:
    comparisons: tuple[Comparison, ...]
    why_none: str = ""  # no comparison: why (no --val, a run too short to validate twice)

    @classmethod
    def of(cls, result: Any, *, temperature: float | None = None) -> Verdict:
        """From a `TrainingResult`: its first validation (step 0, before training) against its last."""
        greedy, sampled = list(result.validations), list(getattr(result, "sampled_validations", []))
        if len(greedy) < 2 or greedy[0].step != 0:
            why = "no validation tasks (--val)" if not greedy else "no validation both before and after training"
            return cls((), why)
        comparisons = [Comparison("greedy", tuple(greedy[0].task_rewards), tuple(greedy[-1].task_rewards))]
        if len(sampled) >= 2 and sampled[0].step == 0:
            label = "sampled" + (f" at temperature {temperature:g}" if temperature is not None else "")
            comparisons.append(Comparison(label, tuple(sampled[0].task_rewards), tuple(sampled[-1].task_rewards)))
        return cls(tuple(comparisons))

    @classmethod
    def from_rewards(cls, greedy: tuple[Sequence[float], Sequence[float]],
                     sampled: tuple[Sequence[float], Sequence[float]] | None = None, *,
                     temperature: float | None = None) -> Verdict:  # fmt: skip
        """From per-task rewards measured outside the loop (SFT: the base model's, then the fine-tuned one's)."""
        comparisons = [Comparison("greedy", tuple(greedy[0]), tuple(greedy[1]))]
        if sampled is not None:
            label = "sampled" + (f" at temperature {temperature:g}" if temperature is not None else "")
            comparisons.append(Comparison(label, tuple(sampled[0]), tuple(sampled[1])))
        return cls(tuple(comparisons))

    @property
    def improved(self) -> bool:
        outcomes = [comparison.outcome for comparison in self.comparisons]
        return IMPROVED in outcomes and WORSE not in outcomes

    @property
    def judged(self) -> bool:
        return bool(self.comparisons)

    def headline(self) -> str:
        if not self.comparisons:
            return f"no verdict: {self.why_none}"
        if self.improved:
            return f"the policy improved beyond noise ({NOISE_SE:g} standard errors) on the held-out tasks"
        if any(comparison.outcome == WORSE for comparison in self.comparisons):
            return "the policy got WORSE beyond noise on the held-out tasks"
        return f"the policy did NOT improve beyond noise ({NOISE_SE:g} standard errors) on the held-out tasks"

    def lines(self) -> list[str]:
        return [self.headline(), *(f"  {comparison.line()}" for comparison in self.comparisons)]

    def as_json(self) -> dict[str, Any]:
        return {"improved": self.improved, "headline": self.headline(), "noise_se": NOISE_SE,
                "comparisons": [comparison.as_json() for comparison in self.comparisons]}  # fmt: skip


__all__ = ["NOISE_SE", "Comparison", "Verdict", "mean_and_error"]
