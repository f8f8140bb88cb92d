"""The benchmarks that need verl or LangChain, in their `--quick` mode, as a reader runs them (the others:
tests/test_benchmark_quick_modes.py). `verl_step_time` runs both paths (verl's own agent loop and ours) for 3 steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_benchmark_quick

ROOT = Path(__file__).resolve().parents[2]

QUICK = {
    "verl_step_time": ("ratio ours/verl",),
    "agent_build_per_rollout": ("ratio ChatOpenAI default / shared",),
}


@pytest.mark.parametrize("name", sorted(QUICK))
def test_quick_mode_runs_and_prints_its_comparison(name: str) -> None:
    run_benchmark_quick(ROOT, name, QUICK[name], timeout=600)
