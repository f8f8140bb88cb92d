"""The benchmarks that need verl or LangChain, in their `--quick` mode, as a reader runs them (the others:
tests/test_benchmark_quick_modes.py). `verl_step_time` runs both paths (verl's own agent loop and ours) for 3 steps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

QUICK = {
    "verl_step_time": "ratio ours/verl",
    "agent_build_per_rollout": "ratio ChatOpenAI default / shared",
}


@pytest.mark.parametrize("name", sorted(QUICK))
def test_quick_mode_runs_and_prints_its_comparison(name: str) -> None:
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    done = subprocess.run(
        [sys.executable, f"benchmarks/{name}.py", "--quick"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert QUICK[name] in done.stdout, done.stdout[-3000:]
