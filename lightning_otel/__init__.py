"""lightning-otel: train the agents you already have with RL, traced with OpenTelemetry.

import lightning_otel.auto            # first import of the agent: instrument everything installed

with lightning_otel.rollout_context("rollout-1", "attempt-1"):
    with lightning_otel.agent("writer"):
        client.chat.completions.create(...)
    lightning_otel.emit_reward(1.0)
lightning_otel.flush()

The package face imports lazily: each public name loads its room (capture, adapters, runtime, training) on first
use, so an agent process that only instruments itself never loads the trainer, the collector or the servers. Each
public name is written once, in `_ROOMS` (name -> the module that defines it).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from lightning_otel.version import __version__

# LiteLLM fetches its model cost map from GitHub when it is imported unless this is set: offline that is ~6 s and
# four warnings per process, for a map whose bundled copy is all a training needs. Set before any agent imports
# LiteLLM (`import lightning_otel` comes first); a value of the user's own wins.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# public name -> the module that defines it
_ROOMS = {
    "lightning_otel.capture.setup": ("Instrumentation", "flush", "instrument", "uninstrument"),
    "lightning_otel.capture.tracer": ("get_tracer",),
    "lightning_otel.capture.agent_naming": ("agent",),
    "lightning_otel.capture.propagation": (
        "RolloutContextMiddleware",
        "extract_context",
        "incoming_context",
        "outgoing_headers",
    ),
    "lightning_otel.capture.reward": ("RolloutContextError", "emit_reward"),
    "lightning_otel.capture.rollout_context": ("RolloutIdentity", "current_rollout", "rollout_context"),
    "lightning_otel.capture.settings": ("register_trainable_endpoint", "unregister_trainable_endpoint"),
    "lightning_otel.adapters.diagnostics": ("CallDecision", "RolloutDiagnostics"),
    "lightning_otel.adapters.triplets": (
        "AdaptedRollout",
        "TraceToTriplet",
        "TracerTraceToTriplet",
        "Triplet",
    ),
    "lightning_otel.adapters.messages": ("TraceToMessages",),
    "lightning_otel.agent_api.lit_agent": ("Attempt", "LitAgent", "NamedResources", "Rollout"),
    "lightning_otel.agent_api.function_agent": ("llm_rollout", "rollout"),
    "lightning_otel.agent_api.resources": ("LLM", "PromptTemplate", "ProxyLLM"),
    "lightning_otel.agent_api.harness_env": ("harness_env",),  # a CLI harness (Claude Code, Codex) in a rollout
    "lightning_otel.runtime.sample_diagnosis": ("AllRolloutsFailed", "NothingTrained"),
    "lightning_otel.runtime.algorithm": ("Algorithm", "Baseline"),
    "lightning_otel.runtime.training_run": ("NoRunner", "RunSettings", "TrainingRun"),
    "lightning_otel.runtime.rollout_batch": ("BatchResult", "RolloutBatch"),
    "lightning_otel.runtime.trainer": ("Trainer",),
    "lightning_otel.runtime.ray_runners": ("RayRunners",),  # runners as Ray actors (ray imported when they start)
    "lightning_otel.runner.runner_process": ("run_runner_processes",),  # a script's `runner` command
    "lightning_otel.runner.runner_options": ("RunnerOptions",),  # a runner's settings in one value
    "lightning_otel.runner.attempt_watch": ("RolloutLimits",),  # per-rollout limits, no-progress rules
    "lightning_otel.agent_api.failures": ("InfrastructureError", "PolicyError", "failure_rule"),
    "lightning_otel.runtime.run_lease": ("RunLost",),
    "lightning_otel.runtime.output": ("quiet",),  # our lines on the terminal, other libraries' in a log file
    "lightning_otel.agent_api.http_agent": ("AgentServiceError", "HttpAgent"),
    "lightning_otel.runtime.task_files": ("load_tasks",),
    "lightning_otel.agent_api.policy_address": (
        "PolicyAddressUnavailable",
        "get_llm_server_address",
        "read_policy_address",
    ),
    "lightning_otel.models.named": ("model_folder",),  # `--model smollm2` or a folder
    "lightning_otel.models.smollm2": ("ModelUnavailable", "smollm2"),  # a real model built offline (the gguf extra)
    "lightning_otel.rewards.client": ("RewardModelClient", "RewardModelError"),  # httpx, tenacity ([rewards])
    "lightning_otel.rewards.scoring": ("score_answer", "weighted_reward"),
    "lightning_otel.export.dataset_export": ("ExportReport", "export_dataset"),  # stores -> datasets
    "lightning_otel.export.atif_import": ("import_atif",),  # ATIF trajectories -> a store
    "lightning_otel.runs.model_export": ("export_model",),  # a checkpoint or adapter -> a Hugging Face model folder
    "lightning_otel.export.shapes": ("PairRule",),
    "lightning_otel.training.sft": ("SFT", "NoDemonstrations", "fine_tune"),  # trl on first use
    "lightning_otel.training.apo.algorithm": ("APO", "APOResult"),  # gepa on first use
    "lightning_otel.training.apo.options": ("APOOptions",),
    "lightning_otel.training.dpo.algorithm": ("DPO", "dpo_from_pairs"),  # trl on first use
    "lightning_otel.training.verl.algorithm": ("VERL",),  # verl itself is imported when a VERL run starts
    # the training loop every backend runs under; a backend of your own subclasses Backend
    "lightning_otel.training.loop.loop": ("TrainingLoop",),
    "lightning_otel.training.loop.options": ("Sampling", "Trackers", "TrainingOptions"),  # the loop's settings
    "lightning_otel.training.loop.result": ("StepRecord", "TrainingResult"),  # what every backend's training returns
    "lightning_otel.training.loop.backend": ("Backend",),
    "lightning_otel.training.loop.schedule": ("Schedule",),
    "lightning_otel.training.loop.advantages": ("GroupAdvantage",),
    "lightning_otel.training.loop.credit": ("AnchorAdvantage",),  # per-call credit (returns, anchor states)
    "lightning_otel.training.loop.distillation": ("Distillation",),  # on-policy distillation's teacher
    # the Tinker-shaped backend: torch + transformers + peft (local), the tinker SDK (remote), on first use
    "lightning_otel.training.tinker.algorithm": ("Tinker",),
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


__all__ = ["__version__", *sorted(_LAZY)]  # each name written once: in _ROOMS
