"""The CPU backend for verl 0.9.1: real GRPO steps on a machine without a GPU, through verl's own plugin points.

verl imports this module in every one of its processes when it is listed in `VERL_USE_EXTERNAL_MODULES` (the
`VERL` algorithm sets that, with `VERL_PLATFORM=cpu`, in Ray's runtime environment). Importing it registers:
- the `cpu` platform (`PlatformRegistry`): device questions answered for CPU, gloo collectives;
- the `hf` rollout (`RolloutReplicaRegistry` + verl's rollout-class table): `rollout.name=hf` serves the policy
  from an HF model on CPU behind the same OpenAI-compatible API vLLM serves.
With `VERL_PLATFORM=cpu` it also applies the three adjustments verl's CUDA-minded code needs (see `_patch_for_cpu`).
Private verl names are used: the `[verl]` extra pins verl==0.9.1 exactly.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from verl.workers.rollout import base as _rollout_base
from verl.workers.rollout.replica import RolloutReplicaRegistry

from lightning_otel.training.verl.cpu import platform as _platform  # noqa: F401  (registers "cpu")

ROLLOUT_NAME = "hf"


def _load_replica() -> type:
    from lightning_otel.training.verl.cpu.replica import HFReplica

    return HFReplica


RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
_rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = "lightning_otel.training.verl.cpu.replica.HFServerAdapter"


def _patch_for_cpu() -> None:
    """What verl assumes of an accelerator, corrected for CPU, before the modules that use it are imported:
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


if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    _patch_for_cpu()
