"""What a rollout recorded of its training, read back: the adapter that selected its calls, the estimator that gave
them their advantages, the staleness bound. `TrainingRun` records them in every rollout's metadata (`adapter`: the
adapter's whole configuration; `training`: the loop's settings), so whoever reads a stored rollout (the rollout view,
the export) explains it with the trainer's own adapter and arithmetic.

Stores written before the whole adapter was recorded kept its fields under other keys (`agent_match`,
`adapter_mode`, `process_rewards`, `estimator`, `max_staleness`): read too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_otel.adapters.triplets import TraceToTriplet


def recorded_adapter(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The adapter configuration a rollout recorded (its dict form: `TraceToTriplet.from_config` takes it)."""
    adapter = metadata.get("adapter")
    if isinstance(adapter, Mapping):
        return dict(adapter)
    return {
        "agent_match": metadata.get("agent_match"),
        "mode": "trajectory" if metadata.get("adapter_mode") == "trajectory" else "transition",
        "process_rewards": metadata.get("process_rewards") or None,
    }


def adapter_of(metadata: Mapping[str, Any], **overrides: Any) -> TraceToTriplet:
    """The trainer's adapter for a rollout, with `overrides` (a reader's own `agent_match`)."""
    return TraceToTriplet.from_config({**recorded_adapter(metadata), **overrides})


def recorded_training(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The training settings a rollout recorded: `estimator` (the settings the view recomputes advantages with, or
    None) and `max_staleness` (0: synchronous steps)."""
    training = metadata.get("training")
    if isinstance(training, Mapping):
        return {"estimator": training.get("estimator"), "max_staleness": int(training.get("max_staleness") or 0)}
    return {"estimator": metadata.get("estimator"), "max_staleness": int(metadata.get("max_staleness") or 0)}


__all__ = ["adapter_of", "recorded_adapter", "recorded_training"]
