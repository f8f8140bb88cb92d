"""One folder per training run: everything it made, named by one id (the folder's name, the collector's run id, the
metrics' `run` field).

    runs/capitals-20261204-153012/
        settings.json       the resolved settings, where each came from, the command line
        store.sqlite3       the collector's store: `lightning-otel ui runs/ID`, `lightning-otel export runs/ID ...`
        metrics.jsonl       every step's metrics (and each validation's), one JSON object a line
        reward_curve.png    training reward per step, validation before and after
        verdict.json        validation before and after, with standard errors, and what it says
        train.log           other libraries' output (Ray, verl, torch, the runners)
        model/              the trained policy: a Hugging Face folder transformers loads and vLLM serves
        checkpoints/        the backend's states, on the schedule's `--save-every`
        warm_start/         the supervised warm start's examples and model (`--warm-start`)
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_otel.collector.stores.stores import FOLDER_STORE as STORE_FILE

SETTINGS_FILE = "settings.json"


def new_run_id(agent: str) -> str:
    """`<agent>-<date>-<time>`: the agent's name (what `--agent` names after the colon), then when it started."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", agent.rsplit(":", 1)[-1]).strip("-.") or "run"
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


@dataclass(frozen=True, slots=True)
class RunFolder:
    path: Path

    @classmethod
    def create(cls, path: str | Path) -> RunFolder:
        """A new run's folder; one that already holds a run's store is refused (a run is never written over)."""
        folder = cls(Path(path))
        if folder.store.exists():
            raise FileExistsError(f"{folder.path} already holds a run (its {STORE_FILE}): give another --run-dir")
        folder.path.mkdir(parents=True, exist_ok=True)
        return folder

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def store(self) -> Path:
        return self.path / STORE_FILE

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.store.resolve()}"

    @property
    def settings(self) -> Path:
        return self.path / SETTINGS_FILE

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def curve(self) -> Path:
        return self.path / "reward_curve.png"

    @property
    def verdict(self) -> Path:
        return self.path / "verdict.json"

    @property
    def log(self) -> Path:
        return self.path / "train.log"

    @property
    def model(self) -> Path:
        return self.path / "model"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def warm_start(self) -> Path:
        return self.path / "warm_start"

    def write_json(self, path: Path, value: Any) -> None:
        path.write_text(json.dumps(value, indent=1, default=str) + "\n", encoding="utf-8")

    def add_settings(self, **values: Any) -> None:
        """More of what the run used, once it is known (the model's folder once built)."""
        settings = json.loads(self.settings.read_text(encoding="utf-8")) if self.settings.is_file() else {}
        self.write_json(self.settings, {**settings, **values})


def is_run_folder(path: str | Path) -> bool:
    """A folder a `lightning-otel train` run left (its store inside)."""
    return (Path(path) / STORE_FILE).is_file()


__all__ = ["RunFolder", "is_run_folder", "new_run_id"]
