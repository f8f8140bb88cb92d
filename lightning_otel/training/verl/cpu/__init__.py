"""The CPU backend for verl 0.9.1: real GRPO steps on a machine without a GPU, through verl's own plugin points.

`register()` puts into verl's registries:
- the `cpu` platform (`PlatformRegistry`): device questions answered for CPU, gloo collectives;
- the `hf` rollout (`RolloutReplicaRegistry` + verl's rollout-class table): `rollout.name=hf` serves the policy
  from an HF model on CPU behind the same OpenAI-compatible API vLLM serves.
In verl's Ray workers (`VERL_USE_EXTERNAL_MODULES` names this module and `VERL_PLATFORM=cpu` is set when `import
verl` imports it) importing this module registers both and applies the three corrections verl's CUDA-minded code
needs (see `_patch_for_cpu`); those processes end with the run. The driver imports it before it sets that
environment, so it only registers, for the run's duration (`cpu_driver`), and keeps nothing
afterwards. verl's private names are reached through `verl_internals`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from lightning_otel.training.verl.verl_internals import (
    register_platform,
    register_rollout,
    resolved_platform,
    set_resolved_platform,
)

ROLLOUT_NAME = "hf"


def _load_replica() -> type:
    from lightning_otel.training.verl.cpu.replica import HFReplica

    return HFReplica


def register() -> Callable[[], None]:
    """The `cpu` platform and the `hf` rollout in verl's registries; returns the undo."""
    from lightning_otel.training.verl.cpu.platform import CPUPlatform

    undo_platform = register_platform("cpu", CPUPlatform)
    undo_rollout = register_rollout(
        ROLLOUT_NAME, _load_replica, "lightning_otel.training.verl.cpu.replica.HFServerAdapter"
    )

    def undo() -> None:
        undo_rollout()
        undo_platform()

    return undo


@contextlib.contextmanager
def cpu_driver(environment: Mapping[str, str]) -> Iterator[None]:
    """verl's CPU platform in this (the driver's) process for a run, then everything as it was: the environment
    variables, the platform verl had resolved, and our registrations. Ray's workers get the same environment from
    the runtime env, import this module with it and keep their corrections (they end with the run)."""
    saved = {key: os.environ.get(key) for key in environment}
    resolved = resolved_platform()
    os.environ.update(environment)
    registered = register()
    set_resolved_platform(None)  # resolved again, now to "cpu"
    try:
        yield
    finally:
        registered()
        set_resolved_platform(resolved)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _patch_for_cpu() -> None:
    """What verl assumes of an accelerator, corrected for CPU in a worker process, before the modules that use it are
    imported:
    1. the process group backend string: verl builds "cpu:gloo,<device>:<backend>", a duplicate on CPU;
    2. FSDP2's CPUOffloadPolicy(pin_memory=True) for the reference model: pinning needs an accelerator;
    3. the training engine lookup is keyed by device: the FSDP engine is registered for "cuda" and runs on CPU."""
    import torch.distributed.fsdp as fsdp
    import verl.utils.distributed as distributed

    original_init = distributed.initialize_global_process_group_ray

    @functools.wraps(original_init)
    def initialize_with_gloo(timeout_second: Any = None, backend: str | None = None) -> Any:
        return original_init(timeout_second=timeout_second, backend=backend or "gloo")

    distributed.initialize_global_process_group_ray = initialize_with_gloo

    class UnpinnedCPUOffloadPolicy(fsdp.CPUOffloadPolicy):
        def __init__(self, pin_memory: bool = False) -> None:
            super().__init__(pin_memory=False)

    fsdp.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy
    for module_name in ("verl.utils.fsdp_utils", "verl.workers.engine.fsdp.transformer_impl"):
        module = sys.modules.get(module_name)
        if module is not None:  # imported before us: patch its own binding too
            module.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy
    for module_name in ("verl.workers.engine_workers", "verl.checkpoint_engine.base"):
        module = sys.modules.get(module_name)
        if module is not None:
            module.initialize_global_process_group_ray = initialize_with_gloo
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")


if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":  # a worker process (see the module docstring)
    register()
    _patch_for_cpu()
