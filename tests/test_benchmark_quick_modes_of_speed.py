"""The quick modes of the benchmarks of speed (capture, export, ingest, the trainer, the engine, the samplers) and of
the front door's backends, each as a reader runs it (`python -m benchmarks.NAME --quick`): exit 0 and its comparison
printed. A file apart from tests/test_benchmark_quick_modes.py (the learning benchmarks, and the inventory of every
benchmark's quick run), so the suite's two workers share the quick runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_benchmark_quick

ROOT = Path(__file__).resolve().parents[1]

# benchmark -> what its output must have (the comparison it exists to print)
HERE: dict[str, tuple[str, ...]] = {
    "capture_overhead": ("lightning-otel",),
    "trainer_throughput": (
        "ratio to uninstrumented",
        "per attempt (40)",
        "to_complete",
        "in test-server units",
        "n_runners=2, span_wait_s=30, 2 fits: ratios",
    ),
    "tinker_step_time": ("ratio traced / direct",),
    "reward_model_service": ("ratio batched / unbatched",),
    "cpu_replica_batching": ("batched (CPUReplica default)",),
    "collector_ingest": ("sustained ingest (ack after commit)", "two collectors on one PostgreSQL"),
    "async_training": ("k=1: speedup over sync", "k=2: speedup over sync"),
    "otlp_export_cost": ("ratio ours / SDK default",),
    "failure_rules": ("drop whole groups: trained", "trained with a failed call: 0"),
    "rollout_reads_with_logs": ("+ attach, no records", "ratio to the plain read"),
    "sampler_snapshot": ("ratio shared-base / whole",),
    "front_door": ("tinker seed 0: exit", "dpo seed 0: exit"),
    "shared_prefix_update": ("ratio shared / whole",),
    "teacher_scoring": ("ratio batched / one at a time",),
}


@pytest.mark.parametrize("name", sorted(HERE))
def test_quick_mode_runs_and_prints_its_comparison(name: str) -> None:
    run_benchmark_quick(ROOT, name, HERE[name], timeout=300)
