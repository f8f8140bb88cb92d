"""What the seeded-run benchmarks (credit_assignment, async_training) share: a success rate's standard error, and
how a run of them ends (the summary printed, every run's numbers written, a non-zero exit when it measured nothing)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any


def standard_error(success: float, count: int) -> float:
    """A binomial proportion's standard error (NaN with no trial)."""
    return math.sqrt(success * (1 - success) / count) if count else math.nan


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
