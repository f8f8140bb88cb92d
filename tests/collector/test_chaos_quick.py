"""The chaos run's quick mode (`python -m benchmarks.chaos --quick`): two minutes of one training on PostgreSQL with
two collectors, a Ray runner and a local runner while the nemesis kills and freezes them, the database, the policy's
connections and the trainer; every check of its checker holds (nothing lost or trained twice), and so does the
fault-free run it is compared with."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_benchmark_quick

pytest.importorskip("ray")  # the trainer extra's verl brings it; the openai3 lane has no Ray


def test_the_chaos_runs_quick_mode_holds_every_check() -> None:
    expected = ("no rollout trained in two steps", "every trained sample from a succeeded attempt",
                "every check held")  # fmt: skip
    run_benchmark_quick(Path(__file__).resolve().parents[2], "chaos", expected, timeout=900)
