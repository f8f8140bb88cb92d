"""verl's `cpu` platform: what verl asks of an accelerator, answered for a machine without one.

verl 0.9 resolves every device question through its platform registry (`VERL_PLATFORM`); it ships `nvidia`, `npu`
and `rocm`. This one (registered by `cpu.register()`) says "cpu" for the device, gloo for collectives and keeps Ray's
`GPU` resource name, so verl's
placement (bundles of {CPU, GPU: 1}) runs on logical GPU slots (`ray.init(num_gpus=N)`) with nothing behind them.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _cpu_device_module() -> types.ModuleType:
    """`torch.cpu` plus the `torch.cuda` calls verl makes unconditionally (cache, memory stats, RNG state)."""
    module = types.ModuleType("lightning_otel_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(module, name, getattr(torch.cpu, name))
    for name in ("empty_cache", "ipc_collect", "set_per_process_memory_fraction", "reset_peak_memory_stats",
                 "set_device", "manual_seed", "manual_seed_all"):  # fmt: skip
        setattr(module, name, _noop)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(module, name, lambda *args, **kwargs: 0)
    module.mem_get_info = lambda *args, **kwargs: (0, 0)
    module.get_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    module.set_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)
    module.get_device_name = lambda *args, **kwargs: "cpu"
    module.is_available = lambda: True
    module.device_count = lambda: 1
    module.current_device = lambda: "cpu"
    return module


class CPUPlatform(PlatformBase):
    _device_module = _cpu_device_module()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return self._device_module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: chosen with VERL_PLATFORM=cpu

    def current_device(self) -> Any:
        # verl moves tensors with `.to(get_device_id())`: an int would mean cuda:N; "cpu" keeps them here.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # set by Ray for GPU slots; harmless with no device behind it

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
