"""lightning-otel: train the agents you already have with RL, traced with OpenTelemetry.

import lightning_otel.auto            # first import of the agent: instrument everything installed

with lightning_otel.rollout_context("rollout-1", "attempt-1"):
    with lightning_otel.agent("writer"):
        client.chat.completions.create(...)
    lightning_otel.emit_reward(1.0)
lightning_otel.flush()
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

from lightning_otel.agent_naming import agent, resolve_agent_name
from lightning_otel.lit_agent import LitAgent, Rollout, rollout
from lightning_otel.propagation import (
    RolloutContextMiddleware,
    extract_context,
    incoming_context,
    outgoing_headers,
)
from lightning_otel.resources import LLM, ProxyLLM
from lightning_otel.reward import RolloutContextError, emit_reward
from lightning_otel.rollout_identity import RolloutIdentity, current_rollout, rollout_context
from lightning_otel.settings import register_trainable_endpoint, unregister_trainable_endpoint
from lightning_otel.trace_adapter import AdaptedRollout, RolloutDiagnostics, TraceToMessages, TraceToTriplet, Triplet
from lightning_otel.tracing import Instrumentation, flush, get_tracer, instrument, uninstrument

if TYPE_CHECKING:
    from lightning_otel.algorithm import Algorithm, Baseline, BatchResult, TrainingRun
    from lightning_otel.trainer import Trainer
    from lightning_otel.verl_algorithm import VERL

# The trainer side needs the collector client (httpx) and rich; an agent process importing lightning_otel does not.
_LAZY = {
    "Algorithm": "lightning_otel.algorithm",
    "Baseline": "lightning_otel.algorithm",
    "BatchResult": "lightning_otel.algorithm",
    "TrainingRun": "lightning_otel.algorithm",
    "Trainer": "lightning_otel.trainer",
    "VERL": "lightning_otel.verl_algorithm",  # verl itself is imported when a VERL run starts
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lightning_otel' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "LLM",
    "VERL",
    "AdaptedRollout",
    "Algorithm",
    "Baseline",
    "BatchResult",
    "Instrumentation",
    "LitAgent",
    "ProxyLLM",
    "Rollout",
    "RolloutContextError",
    "RolloutContextMiddleware",
    "RolloutDiagnostics",
    "RolloutIdentity",
    "TraceToMessages",
    "TraceToTriplet",
    "Trainer",
    "TrainingRun",
    "Triplet",
    "__version__",
    "agent",
    "current_rollout",
    "emit_reward",
    "extract_context",
    "flush",
    "get_tracer",
    "incoming_context",
    "instrument",
    "outgoing_headers",
    "register_trainable_endpoint",
    "resolve_agent_name",
    "rollout",
    "rollout_context",
    "uninstrument",
    "unregister_trainable_endpoint",
]
