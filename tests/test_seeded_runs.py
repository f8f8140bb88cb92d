"""benchmarks/_seeded_runs.py: the pooled comparison every learning benchmark prints."""

from __future__ import annotations

from benchmarks._seeded_runs import pooled_comparison


def runs_of(arm: str, successes: list[float], rollouts: int = 48) -> list[dict]:
    return [{"arm": arm, "validations": [{"success": s, "rollouts": rollouts}]} for s in successes]


def test_the_gain_in_standard_errors() -> None:
    lines = pooled_comparison(runs_of("grpo", [0.5, 0.5]) + runs_of("new", [0.75, 0.75]), "arm", "grpo", "new")
    assert lines[-1] == "gain new - grpo: +0.250 = +3.7 x its standard error (0.068); beyond 2 x: yes"


def test_arms_without_spread_are_said_so_not_nan() -> None:
    tied = pooled_comparison(runs_of("grpo", [0.0]) + runs_of("new", [0.0]), "arm", "grpo", "new")
    assert tied[-1] == "gain new - grpo: +0.000; every rollout of each arm scored alike (standard error 0): the same"
    apart = pooled_comparison(runs_of("grpo", [1.0]) + runs_of("new", [0.0]), "arm", "grpo", "new", either_way=True)
    assert apart[-1].endswith("(standard error 0): beyond any binomial noise") and "nan" not in apart[-1]
    worse = pooled_comparison(runs_of("grpo", [1.0]) + runs_of("new", [0.0]), "arm", "grpo", "new")
    assert worse[-1].endswith(": worse")
