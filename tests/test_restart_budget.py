"""Runner deaths: ridden out when they come now and then over a long run, a stop with one line when runners keep
dying (a lifetime count ended a 30-minute chaos run whose Ray runner was killed 13 times, minutes apart)."""

from __future__ import annotations

import pytest

from lightning_otel.runtime.restart_budget import RestartBudget, RunnersKeepDying


def test_deaths_spread_over_a_long_run_are_ridden_out() -> None:
    budget = RestartBudget(3, window_s=300)
    for minute in range(0, 60, 2):  # one death every two minutes for an hour: 30 in all, at most 3 in 5 minutes
        budget.spend("killed", now=minute * 60.0)
    assert budget.deaths == 30


def test_runners_that_keep_dying_stop_the_training_with_one_line() -> None:
    budget = RestartBudget(3, window_s=300)
    for second in range(3):
        budget.spend("exited with code 1", now=float(second))
    with pytest.raises(RunnersKeepDying, match=r"runners died 4 times in the last 300 s \(more than 3; 4 in the whole "
                       r"training\); the last: exited with code 1"):  # fmt: skip
        budget.spend("exited with code 1", now=3.0)
    with pytest.raises(ValueError, match="limit >= 1"):
        RestartBudget(0)
