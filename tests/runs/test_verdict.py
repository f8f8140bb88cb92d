"""Whether a run learned: per-task rewards before and after, a change beyond two standard errors of the difference."""

from __future__ import annotations

import math

import pytest

from lightning_otel.runs.verdict import IMPROVED, WITHIN_NOISE, WORSE, Comparison, Verdict, mean_and_error
from lightning_otel.training.loop.result import StepRecord, TrainingResult


def test_the_standard_error_is_the_tasks_spread_over_their_count() -> None:
    mean, error = mean_and_error([0.0, 1.0, 1.0, 0.0])
    assert (mean, error) == (0.5, pytest.approx(math.sqrt(1 / 3) / 2))
    assert mean_and_error([])[0] != mean_and_error([])[0]  # NaN: nothing measured


def test_a_change_is_judged_against_the_error_of_the_difference() -> None:
    up = Comparison("greedy", (0.0,) * 8 + (1.0,) * 8, (0.0,) * 2 + (1.0,) * 14)
    assert up.change == pytest.approx(0.375)
    assert up.error == pytest.approx(math.hypot(*(mean_and_error(v)[1] for v in (up.before, up.after))))
    assert up.standard_errors > 2 and up.outcome == IMPROVED
    assert Comparison("greedy", up.after, up.before).outcome == WORSE
    assert Comparison("greedy", (0.0, 1.0) * 8, (1.0, 0.0, 1.0, 1.0) * 4).outcome == WITHIN_NOISE
    assert Comparison("greedy", (0.5,) * 4, (0.5,) * 4).standard_errors == 0.0  # no change, no spread
    assert Comparison("greedy", (0.0,) * 4, (1.0,) * 4).outcome == IMPROVED  # every task up, no spread


def validation(step: int, rewards: list[float]) -> StepRecord:
    return StepRecord(step, {"val/reward_mean": sum(rewards) / len(rewards)}, task_rewards=rewards)


def test_the_loops_first_and_last_validations_make_the_verdict() -> None:
    result = TrainingResult(validations=[validation(0, [0.0] * 8 + [1.0] * 8), validation(8, [0.0] + [1.0] * 15)],
                            sampled_validations=[validation(0, [0.2] * 16), validation(8, [0.21] * 16)])  # fmt: skip
    verdict = Verdict.of(result, temperature=0.7)
    assert verdict.improved  # greedy beyond noise, sampled flat within it: none worse
    assert [c.label for c in verdict.comparisons] == ["greedy", "sampled at temperature 0.7"]
    assert verdict.lines()[0].startswith("the policy improved beyond noise")
    assert verdict.as_json()["comparisons"][0]["outcome"] == IMPROVED


def test_no_verdict_without_a_validation_before_and_after() -> None:
    assert Verdict.of(TrainingResult()).why_none == "no validation tasks (--val)"
    assert not Verdict.of(TrainingResult(validations=[validation(4, [1.0])])).judged
    assert Verdict.of(TrainingResult()).headline().startswith("no verdict")


def test_a_fall_beyond_noise_is_said_plainly_and_is_no_improvement() -> None:
    verdict = Verdict.from_rewards(([1.0] * 16, [0.0] * 16), ([0.0] * 16, [1.0] * 16))
    assert not verdict.improved and "WORSE" in verdict.headline()
