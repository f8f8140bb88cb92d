"""Per-step metrics: a short console line, every metric in metrics.jsonl, and verl's trackers (its `file` backend
here: the same `trainer.logger` names VERL runs take)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_otel.training.loop.metrics import MetricsLog

METRICS = {"rollout/reward_mean": 0.25, "train/datums": 32.0, "train/loss_sum": -1.5, "val/reward_mean": float("nan")}


def test_console_and_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = MetricsLog(("console", "jsonl"), project="p", experiment="e", log_dir=tmp_path)
    log.log(3, METRICS)
    log.close()
    log = MetricsLog(("console",), project="p", experiment="e", log_dir=None)
    log.log(4, {**METRICS, "val/reward_mean": 0.5})
    log.close()
    # A step without validation (NaN) leaves the field out rather than printing "val nan".
    assert capsys.readouterr().out == "step 3: reward 0.250  datums 32\nstep 4: reward 0.250  val 0.500  datums 32\n"
    (line,) = (tmp_path / "metrics.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert (record["run"], record["step"], record["train/loss_sum"]) == ("e", 3, -1.5)


def test_verl_trackers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("verl")
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "verl.jsonl"))
    log = MetricsLog(("file",), project="p", experiment="e", log_dir=None)
    log.log(1, METRICS)
    log.close()
    (line,) = (tmp_path / "verl.jsonl").read_text().splitlines()
    assert json.loads(line)["data"]["rollout/reward_mean"] == 0.25


def test_jsonl_needs_a_folder() -> None:
    with pytest.raises(ValueError, match="log_dir"):
        MetricsLog(("jsonl",), project="p", experiment="e", log_dir=None)
