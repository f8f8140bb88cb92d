"""`lightning-otel demo` (slow: about 3 minutes): a tiny model trained with VERL on CPU learns its toy task."""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
from pathlib import Path


def test_the_demo_trains_and_the_reward_rises(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "lightning_otel.cli", "demo", "--steps", "40", "--workdir", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rewards = [float(value) for value in re.findall(r"step +\d+ +reward ([0-9.]+)", done.stdout)]
    assert len(rewards) == 40
    steps = list(range(len(rewards)))
    slope = statistics.linear_regression(steps, rewards).slope
    first, last = statistics.fmean(rewards[:10]), statistics.fmean(rewards[-10:])
    assert slope > 0 and last > first + 0.05, (first, last, rewards)
    assert (tmp_path / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "agl-otel-collector link ro-" in done.stdout  # how to open the traces, with a real rollout id
    assert (tmp_path / "collector.sqlite3").stat().st_size > 0
