"""Runner deaths: ridden out when runners that served a while die now and then over a long run, however often; a
stop with one line when runners keep dying young (a lifetime count ended 30-minute chaos runs whose Ray runner was
killed 10-13 times, minutes apart; a window over every death ended one whose runner was killed 4 times in 5 minutes)."""

from __future__ import annotations

import pytest

from lightning_otel.runtime.restart_budget import RestartBudget, RunnersKeepDying


def test_runners_killed_after_serving_a_while_are_ridden_out_however_often() -> None:
    budget = RestartBudget(3, window_s=300)
    for second in range(0, 1800, 90):  # a kill every 90 s for 30 minutes, each runner having served 90 s
        budget.spend("killed", lived_s=90.0, now=float(second))
    assert budget.deaths == 20


def test_young_deaths_spread_over_time_are_ridden_out() -> None:
    budget = RestartBudget(3, window_s=300)
    for minute in range(0, 60, 2):  # a runner dying at start every two minutes: at most 3 in 5 minutes
        budget.spend("exited with code 1", lived_s=2.0, now=minute * 60.0)


def test_runners_that_keep_dying_young_stop_the_training_with_one_line() -> None:
    budget = RestartBudget(3, window_s=300, young_s=60)
    for second in range(3):
        budget.spend("exited with code 1", lived_s=1.0, now=float(second))
    with pytest.raises(RunnersKeepDying, match=r"runners died 4 times within 60 s of starting in the last 300 s "
                       r"\(more than 3; 4 deaths in the whole training\); the last: exited with code 1"):  # fmt: skip
        budget.spend("exited with code 1", lived_s=1.0, now=3.0)
    with pytest.raises(ValueError, match="limit >= 1"):
        RestartBudget(0)
