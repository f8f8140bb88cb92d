"""`lightning-otel train` bounds a rollout (issue 72's third defect: a hung tool call stalled a CLI training for
ever): `--rollout-timeout` (900 s unless given) stops an attempt that runs too long, `--rollout-limits` sets the
runners' no-progress limits, and a limit that is not one is bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LIGHTNING = [sys.executable, "-m", "lightning_otel.cli"]
HUNG = "lightning_otel.testing.runtime_agents:sleeping_agent"


def test_a_hung_rollout_is_stopped_by_the_timeout_and_said(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "q", "sleep_s": 600}\n')  # a tool call that never returns, as far as a run cares
    done = subprocess.run([*LIGHTNING, "train", "--dev", "--test-server", "--agent", HUNG, "--train", str(tasks),
                           "--rollout-timeout", "2"], capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "timed out 1" in done.stdout and "ran past its timeout_s" in done.stdout + done.stderr


def test_the_timeout_has_a_default_and_the_limits_are_flags() -> None:
    from lightning_otel.cli.collector_flags import run_settings, runner_options
    from lightning_otel.cli.main import build_parser

    args = build_parser().parse_args(["train", "--agent", "m:a", "--train", "t.jsonl",
                                      "--rollout-limits", "max_llm_calls=50,max_repeats=0"])  # fmt: skip
    assert run_settings(args).rollout_timeout_s == 900.0
    limits = runner_options(args, None).limits
    assert (limits.max_llm_calls, limits.max_repeats, limits.max_empty) == (50, None, 8)


def test_a_rollout_limit_that_is_not_one_is_one_line(tmp_path: Path) -> None:
    for value, said in (("max_calls=5", "unknown rollout limit(s) ['max_calls']"), ("max_repeats=-1", "NAME=WHOLE")):
        done = subprocess.run([*LIGHTNING, "train", "--agent", "m:a", "--train", str(tmp_path / "t.jsonl"),
                               "--rollout-limits", value], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "argument --rollout-limits" in done.stderr and said in done.stderr, done.stderr
