"""The ADK example as its README runs it, in one environment with ADK, LiteLLM, the trainer and VERL: the dry run
against the scripted test server, and 2 GRPO steps on CPU whose samples are the ADK agents' calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ADK = ROOT / "examples" / "google_adk"


def run(script: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "LITELLM_LOCAL_MODEL_COST_MAP"}  # its own default
    done = subprocess.run([sys.executable, script, *args], cwd=ADK, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("adk")
    done = run("prepare_dataset.py", "--outdir", str(out), timeout=300)
    assert "train.parquet (1514)" in done.stdout and "test.parquet (500)" in done.stdout
    return out / "data"


def test_the_dry_run_traces_writer_and_checker_with_token_ids(data: Path) -> None:
    done = run("adk_debug.py", "--file", str(data / "test.parquet"), "--test-server", "--n-tasks", "2", timeout=300)
    out = done.stdout
    assert "dry run: 2 rollouts, 6 samples, execution accuracy 1.00" in out  # run_sql, answer, exit_loop
    assert "invoke_agent sql_writer" in out and "execute_tool run_sql" in out and "execute_tool exit_loop" in out
    assert "framework span, not an LLM call" in out  # ADK's generate_content spans
    assert "no token ids" not in out and "without token ids 0" in out
    writer_rows = [line for line in out.splitlines() if line.startswith("│ sql_writer")]
    assert len(writer_rows) == 4 and all(line.rstrip(" │").endswith("1") for line in writer_rows)  # trained reward


def test_two_grpo_steps_train_the_adk_agents_calls(data: Path, tmp_path: Path) -> None:
    run("train_adk.py", "--ci-fast", "--train-file", str(data / "train.parquet"), "--val-file",
        str(data / "test.parquet"), "--workdir", str(tmp_path))  # fmt: skip
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [step["step"] for step in summary["steps"]] == [1, 2]
    for step in summary["steps"]:
        metrics = step["metrics"]
        assert metrics["rollout/succeeded"] == metrics["rollout/rollouts"] == 4  # 2 tasks x 2 rollouts
        # agent_match="LitAdkAgent" (the seed's): every call of the ADK agent's rollouts, writer and checker
        assert set(step["sample_agents"]) == {"sql_writer", "sql_checker"}
        assert metrics["training/skipped_step"] == 0 and metrics["batch/rows"] == sum(step["sample_agents"].values())
        assert metrics["batch/padding_rows"] == 0 and metrics["rollout/calls_without_token_ids"] == 0
        assert metrics["training/rollout_probs_diff_max"] < 1e-3
        assert metrics["prompt_length/mean"] > 300  # the schema with sample rows and ADK's history
