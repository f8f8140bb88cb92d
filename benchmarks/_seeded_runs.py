"""What the seeded-run benchmarks (credit_assignment, async_training) share: every arm for every seed in a scratch
folder, a success rate's standard error, and how a run of them ends (the summary printed, every run's numbers
written, a non-zero exit when it measured nothing)."""

from __future__ import annotations

import json
import math
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


def standard_error(success: float, count: int) -> float:
    """A binomial proportion's standard error (NaN with no trial)."""
    return math.sqrt(success * (1 - success) / count) if count else math.nan


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
    beyond = se and (abs(gain) if either_way else gain) > 2 * se
    lines.append(f"gain {candidate} - {baseline}: {gain:+.3f} = {gain / se if se else math.nan:+.1f} x its standard "
                 f"error ({se:.3f}); beyond 2 x: {'yes' if beyond else 'no'}")  # fmt: skip
    return lines


def finish(runs: list[dict[str, Any]], lines: list[str], complete: bool, out: Path | None) -> int:
    """Print the summary, write the runs to `out` (JSON), and the exit code: 1 when a run was not a measurement."""
    print("\n".join(lines))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(runs, indent=1))
    if not complete:
        print("not a measurement: a step trained nothing or a validation had no rollout", file=sys.stderr)
        return 1
    return 0
