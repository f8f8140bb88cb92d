"""Per-step metrics to the trackers VERL's `trainer.logger` names: "console" and "jsonl" here; any other (wandb,
tensorboard, mlflow, swanlab, ...) through verl's own `Tracking` when verl is installed."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

OWN_BACKENDS = ("console", "jsonl")
# What a console line shows (every metric goes to the other trackers).
CONSOLE_KEYS = {
    "reward/mean": "reward",
    "val/reward_mean": "val",
    "succeeded": "ok",
    "failed": "failed",
    "runners": "runners",
    "train/datums": "datums",
    "train/tokens": "tokens",
    "train/constant_groups": "constant groups",
    "policy/version": "policy v",
    "train/grad_norm": "grad norm",
    "time/rollouts_s": "rollouts s",
    "time/train_s": "train s",
}


class MetricsLog:
    def __init__(
        self,
        backends: Sequence[str],
        *,
        project: str,
        experiment: str,
        log_dir: Path | None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.experiment = experiment
        self.console = "console" in backends
        self.jsonl = (log_dir / "metrics.jsonl") if "jsonl" in backends and log_dir is not None else None
        if "jsonl" in backends and log_dir is None:
            raise ValueError("logger 'jsonl' needs a log_dir")
        others = [backend for backend in backends if backend not in OWN_BACKENDS]
        self._tracking: Any = None
        if others:
            try:
                from verl.utils.tracking import Tracking
            except ImportError as exc:
                raise ValueError(f"logger {others} needs verl's Tracking (pip install lightning-otel[verl])") from exc
            self._tracking = Tracking(project, experiment, default_backend=others, config=dict(config or {}))
        if self.jsonl is not None:
            self.jsonl.parent.mkdir(parents=True, exist_ok=True)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        if self.console:
            shown = "  ".join(f"{name} {_short(metrics[key])}" for key, name in CONSOLE_KEYS.items() if key in metrics)
            print(f"step {step}: {shown}", flush=True)
        if self.jsonl is not None:
            with self.jsonl.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"run": self.experiment, "step": step, **metrics}) + "\n")  # runs append
        if self._tracking is not None:
            self._tracking.log(data=dict(metrics), step=step)

    def close(self) -> None:
        """Flush and close the trackers' runs (wandb's run, tensorboard's writer, verl's file)."""
        if self._tracking is not None:
            self._tracking.finish()
            self._tracking = None


def _short(value: float) -> str:
    if math.isnan(value) or value != int(value):
        return f"{value:.3f}"
    return str(int(value))
