"""The newcomer's commands work: `lightning-otel demo --trace-only` and the example's --dev dry run (the training
demo runs in the verl lane, tests/verl_lane/test_train_demo.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGL_"))}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def test_demo_prints_each_rollout_with_token_ids_and_rewards(tmp_path):
    result = subprocess.run(
        [str(BIN / "lightning-otel"), "demo", "--trace-only"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean_env(), "TMPDIR": str(tmp_path)},
        check=True,
    )
    assert not list(tmp_path.glob("agl-demo-*")), "the demo's scratch store was left behind"
    out = result.stdout
    assert "embedded agl-otel-collector" in out and "read back from the collector's store" in out
    assert out.count("rollout demo-rollout-") == 3
    assert out.count("agent=writer") == 3 and out.count("agent=checker") == 3
    assert "complete=False" not in out and "response_ids=0" not in out
    assert "agl.reward             value=0.0" in out


def test_example_dev_run(tmp_path):
    result = subprocess.run(
        [
            str(BIN / "lightning-otel-run"),
            "--",
            sys.executable,
            str(ROOT / "examples/sql_agent/agent.py"),
            "--dev",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean_env(), "OTEL_TRACES_EXPORTER": "none"},
        check=True,
    )
    assert "reward=" in result.stdout


def test_the_training_demo_fails_when_its_reward_did_not_rise() -> None:
    from lightning_otel.cli.train_demo import rise_verdict

    rising = [0.1] * 10 + [0.2] * 20 + [0.3] * 10  # the seeded demo: ~0.12 -> ~0.29 over 40 steps
    assert rise_verdict(rising) == (False, "")
    failed, said = rise_verdict([0.2] * 40)
    assert failed and said == "the reward did not rise by 0.05 (0.200 -> 0.200 over 40 steps)"
    assert rise_verdict([0.2] * 10 + [0.24] * 10)[0]  # +0.04 over 20 steps: not enough
    assert rise_verdict([0.3, 0.1, 0.0, 0.0]) == (False, "(4 steps: too few to judge the rise; 20 or more are)")
