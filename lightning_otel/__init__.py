"""lightning-otel: train the agents you already have with RL, traced with OpenTelemetry.

import lightning_otel.auto            # first import of the agent: instrument everything installed

with lightning_otel.rollout_context("rollout-1", "attempt-1"):
    with lightning_otel.agent("writer"):
        client.chat.completions.create(...)
    lightning_otel.emit_reward(1.0)
lightning_otel.flush()

The package face imports lazily: each public name loads its room (capture, adapters, runtime, training) on first
use, so an agent process that only instruments itself never loads the trainer, the collector or the servers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lightning_otel.version import __version__

if TYPE_CHECKING:
    from lightning_otel.adapters.messages import TraceToMessages
    from lightning_otel.adapters.triplets import (
        AdaptedRollout,
        RolloutDiagnostics,
        TracerTraceToTriplet,
        TraceToTriplet,
        Triplet,
    )
    from lightning_otel.capture.agent_naming import agent, resolve_agent_name
    from lightning_otel.capture.propagation import (
        RolloutContextMiddleware,
        extract_context,
        incoming_context,
        outgoing_headers,
    )
    from lightning_otel.capture.reward import RolloutContextError, emit_reward
    from lightning_otel.capture.rollout_context import RolloutIdentity, current_rollout, rollout_context
    from lightning_otel.capture.settings import register_trainable_endpoint, unregister_trainable_endpoint
    from lightning_otel.capture.setup import Instrumentation, flush, instrument, uninstrument
    from lightning_otel.capture.tracer import get_tracer
    from lightning_otel.rewards.client import RewardModelClient, RewardModelError
    from lightning_otel.rewards.scoring import score_answer, weighted_reward
    from lightning_otel.runtime.algorithm import Algorithm, Baseline, BatchResult, TrainingRun
    from lightning_otel.runtime.function_agent import llm_rollout, rollout
    from lightning_otel.runtime.http_agent import AgentServiceError, HttpAgent
    from lightning_otel.runtime.lit_agent import Attempt, LitAgent, NamedResources, Rollout
    from lightning_otel.runtime.policy_address import (
        PolicyAddressUnavailable,
        get_llm_server_address,
        read_policy_address,
    )
    from lightning_otel.runtime.resources import LLM, PromptTemplate, ProxyLLM
    from lightning_otel.runtime.sample_diagnosis import AllRolloutsFailed, NothingTrained
    from lightning_otel.runtime.task_files import load_tasks
    from lightning_otel.runtime.trainer import Trainer
    from lightning_otel.training.sft import SFT, NoDemonstrations, SFTResult, fine_tune
    from lightning_otel.training.tinker.algorithm import Tinker, TinkerResult
    from lightning_otel.training.tinker.local_engine import LocalEngine
    from lightning_otel.training.tinker.remote_engine import RemoteEngine
    from lightning_otel.training.tinker.types import AdamParams, Datum, SamplingParams
    from lightning_otel.training.verl.algorithm import VERL

# public name -> the module that defines it
_ROOMS = {
    "lightning_otel.capture.setup": ("Instrumentation", "flush", "instrument", "uninstrument"),
    "lightning_otel.capture.tracer": ("get_tracer",),
    "lightning_otel.capture.agent_naming": ("agent", "resolve_agent_name"),
    "lightning_otel.capture.propagation": (
        "RolloutContextMiddleware",
        "extract_context",
        "incoming_context",
        "outgoing_headers",
    ),
    "lightning_otel.capture.reward": ("RolloutContextError", "emit_reward"),
    "lightning_otel.capture.rollout_context": ("RolloutIdentity", "current_rollout", "rollout_context"),
    "lightning_otel.capture.settings": ("register_trainable_endpoint", "unregister_trainable_endpoint"),
    "lightning_otel.adapters.triplets": (
        "AdaptedRollout",
        "RolloutDiagnostics",
        "TraceToTriplet",
        "TracerTraceToTriplet",
        "Triplet",
    ),
    "lightning_otel.adapters.messages": ("TraceToMessages",),
    "lightning_otel.runtime.lit_agent": ("Attempt", "LitAgent", "NamedResources", "Rollout"),
    "lightning_otel.runtime.function_agent": ("llm_rollout", "rollout"),
    "lightning_otel.runtime.resources": ("LLM", "PromptTemplate", "ProxyLLM"),
    "lightning_otel.runtime.sample_diagnosis": ("AllRolloutsFailed", "NothingTrained"),
    "lightning_otel.runtime.algorithm": ("Algorithm", "Baseline", "BatchResult", "TrainingRun"),
    "lightning_otel.runtime.trainer": ("Trainer",),
    "lightning_otel.runtime.http_agent": ("AgentServiceError", "HttpAgent"),
    "lightning_otel.runtime.task_files": ("load_tasks",),
    "lightning_otel.runtime.policy_address": (
        "PolicyAddressUnavailable",
        "get_llm_server_address",
        "read_policy_address",
    ),
    "lightning_otel.rewards.client": ("RewardModelClient", "RewardModelError"),  # httpx, tenacity ([rewards])
    "lightning_otel.rewards.scoring": ("score_answer", "weighted_reward"),
    "lightning_otel.training.sft": ("SFT", "SFTResult", "NoDemonstrations", "fine_tune"),  # trl on first use
    "lightning_otel.training.verl.algorithm": ("VERL",),  # verl itself is imported when a VERL run starts
    # the Tinker-shaped backend: torch + transformers + peft (local), the tinker SDK (remote), on first use
    "lightning_otel.training.tinker.algorithm": ("Tinker", "TinkerResult"),
    "lightning_otel.training.tinker.local_engine": ("LocalEngine",),
    "lightning_otel.training.tinker.remote_engine": ("RemoteEngine",),
    "lightning_otel.training.tinker.types": ("AdamParams", "Datum", "SamplingParams"),
}
_LAZY = {name: module for module, names in _ROOMS.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lightning_otel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "LLM",
    "SFT",
    "VERL",
    "AdamParams",
    "AdaptedRollout",
    "AgentServiceError",
    "Algorithm",
    "AllRolloutsFailed",
    "Attempt",
    "Baseline",
    "BatchResult",
    "Datum",
    "HttpAgent",
    "Instrumentation",
    "LitAgent",
    "LocalEngine",
    "NamedResources",
    "NoDemonstrations",
    "NothingTrained",
    "PolicyAddressUnavailable",
    "PromptTemplate",
    "ProxyLLM",
    "RemoteEngine",
    "RewardModelClient",
    "RewardModelError",
    "Rollout",
    "RolloutContextError",
    "RolloutContextMiddleware",
    "RolloutDiagnostics",
    "RolloutIdentity",
    "SFTResult",
    "SamplingParams",
    "Tinker",
    "TinkerResult",
    "TraceToMessages",
    "TraceToTriplet",
    "TracerTraceToTriplet",
    "Trainer",
    "TrainingRun",
    "Triplet",
    "__version__",
    "agent",
    "current_rollout",
    "emit_reward",
    "extract_context",
    "fine_tune",
    "flush",
    "get_llm_server_address",
    "get_tracer",
    "incoming_context",
    "instrument",
    "llm_rollout",
    "load_tasks",
    "outgoing_headers",
    "read_policy_address",
    "register_trainable_endpoint",
    "resolve_agent_name",
    "rollout",
    "rollout_context",
    "score_answer",
    "uninstrument",
    "unregister_trainable_endpoint",
    "weighted_reward",
]
