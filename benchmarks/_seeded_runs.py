"""What the seeded-run benchmarks (credit_assignment, async_training) share: every arm for every seed in a scratch
folder, a success rate's standard error, and how a run of them ends (the summary printed, every run's numbers
written, a non-zero exit when it measured nothing)."""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def every_arm(
    seeds: Sequence[int], arms: Sequence[str], one_run: Callable[[str, int, Path], dict[str, Any]], prefix: str
) -> list[dict[str, Any]]:
    """`one_run(arm, seed, folder)` for each seed, each arm in turn, in one scratch folder (the models built per seed
    are shared by the arms); each run's numbers printed as a JSON line as it ends."""
    runs = []
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        for seed in seeds:
            for arm in arms:
                runs.append(one_run(arm, seed, Path(folder)))
                print(json.dumps(runs[-1]), flush=True)
    return runs


def estimator_of(arm: str) -> Any:
    """An arm's advantage: "grpo" (each call trained on its rollout's outcome), or per-call credit ("anchor") with
    GiGPO's settings where a task leaves a choice: step weight 1, discount 0.9 (a step taken sooner is worth more),
    the cookbook's mean-only baselines, a call alone in its state given no step advantage."""
    if arm == "grpo":
        return "grpo"
    import lightning_otel as agl

    return agl.AnchorAdvantage(step_weight=1.0, gamma=0.9, normalize_by_std=False, lone="zero")


def standard_error(success: float, count: int) -> float:
    """A binomial proportion's standard error (NaN with no trial)."""
    return math.sqrt(success * (1 - success) / count) if count else math.nan


SUCCESS_HEADER = f"{'success start':>14} {'middle':>8} {'end (+-SE)':>16} {'train reward first5 -> last5':>30}"


def success_cells(run: dict[str, Any]) -> str:
    """A run's success at the start, the middle validation and the end (with its standard error), and its training
    reward over the first and last five steps: the columns under `SUCCESS_HEADER`."""
    val = run["validations"]
    end = val[-1]
    rewards = run["train_reward"]
    head, tail = statistics.fmean(rewards[:5]), statistics.fmean(rewards[-5:])
    se = standard_error(end["success"], end["rollouts"])
    return (f"{val[0]['success']:>14.3f} {val[len(val) // 2]['success']:>8.3f} {end['success']:>8.3f} +-{se:.3f} "
            f"{head:>19.3f} -> {tail:.3f}")  # fmt: skip


def is_measurement(run: dict[str, Any]) -> bool:
    """Every step trained and every validation had rollouts."""
    return run["trained_steps"] == len(run["train_reward"]) and all(v["rollouts"] for v in run["validations"])


def pooled_comparison(
    runs: Sequence[dict[str, Any]], key: str, baseline: str, candidate: str, *, either_way: bool = False
) -> list[str]:
    """Lines for each arm's final success pooled over its seeds' last validations, and the candidate's gain over
    the baseline in units of its standard error (`either_way`: a loss beyond 2 x counts too)."""
    lines, pooled = [], {}
    for arm in (baseline, candidate):
        ends = [run["validations"][-1] for run in runs if run[key] == arm]
        wins = sum(v["success"] * v["rollouts"] for v in ends)
        count = sum(v["rollouts"] for v in ends)
        pooled[arm] = (wins / count if count else math.nan, count)
        lines.append(f"pooled {arm}: final success {pooled[arm][0]:.3f} +- {standard_error(*pooled[arm]):.3f} over "
                     f"{count} rollouts ({len(ends)} seeds)")  # fmt: skip
    (base, n_base), (cand, n_cand) = pooled[baseline], pooled[candidate]
    se = math.sqrt(standard_error(base, n_base) ** 2 + standard_error(cand, n_cand) ** 2)
    gain = cand - base
    if se == 0 and n_base and n_cand:  # every rollout of each arm scored alike (0 or 1): no binomial spread to scale by
        verdict = "the same" if gain == 0 else "beyond any binomial noise" if gain > 0 or either_way else "worse"
        lines.append(f"gain {candidate} - {baseline}: {gain:+.3f}; every rollout of each arm scored alike (standard "
                     f"error 0): {verdict}")  # fmt: skip
        return lines
    beyond = se and (abs(gain) if either_way else gain) > 2 * se
    lines.append(f"gain {candidate} - {baseline}: {gain:+.3f} = {gain / se if se else math.nan:+.1f} x its standard "
                 f"error ({se:.3f}); beyond 2 x: {'yes' if beyond else 'no'}")  # fmt: skip
    return lines


def finish(runs: list[dict[str, Any]], lines: list[str], complete: bool, out: Path | None,
           why: str = "a step trained nothing or a validation had no rollout") -> int:  # fmt: skip
    """Print the summary, write the runs to `out` (JSON), and the exit code: 1 when a run was not a measurement
    (`why` says what such a run lacked)."""
    print("\n".join(lines))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(runs, indent=1))
    if not complete:
        print(f"not a measurement: {why}", file=sys.stderr)
        return 1
    return 0
