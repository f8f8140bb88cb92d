"""verl's configuration for `VERL`: verl's own defaults (`ppo_trainer.yaml`), the user's dict, `key=value` overrides,
and, on a machine without a GPU, what the CPU backend needs.

    config = compose_verl_config({"algorithm": {"adv_estimator": "grpo"}, "data": {...}, "actor_rollout_ref": {...}},
                                 overrides=["trainer.total_training_steps=2"])

The user's keys win over the CPU and GPU defaults (merged on top of them), except where they cannot run: the checks
in config_checks.py (rollout engine, micro-batches, checkpoint folder) run on the result before anything starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

# What verl 0.9.1 needs to train on CPU (measured on 2 cores; see the README's training section). The rollout is
# our `hf` replica (lightning_otel.training.verl.cpu); no CUDA graphs, compilation, fused kernels or remove-padding
# paths. The actor and reference compute in float32 like the replica: verl's FSDP engine otherwise autocasts to
# bfloat16, which on a CPU is slower and made the actor's log-probs differ from the sampler's by up to 0.06.
FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
CPU_DEFAULTS: dict[str, Any] = {
    "trainer": {"device": "cpu", "n_gpus_per_node": 1, "nnodes": 1, "use_v1": False, "logger": ["console"]},
    "data": {"dataloader_num_workers": 0},
    "actor_rollout_ref": {
        "rollout": {
            "name": "hf",
            "tensor_model_parallel_size": 1,
            "agent": {"num_workers": 1},
            "dtype": "float32",
        },
        "actor": {
            "strategy": "fsdp2",
            "use_torch_compile": False,
            "fsdp_config": {"param_offload": False, "optimizer_offload": False, "mixed_precision": FP32},
        },
        "ref": {"strategy": "fsdp2", "use_torch_compile": False, "fsdp_config": {"mixed_precision": FP32}},
        "model": {"use_remove_padding": False, "override_config": {"attn_implementation": "sdpa"}},
    },
    "ray_kwargs": {"ray_init": {"num_cpus": 8, "num_gpus": 1}},
}

# On every device: the legacy (non-TransferQueue) trainer's pieces, which the VERL backend drives; no verl agent-loop
# or reward-loop workers (the runners generate, the traces carry the rewards); one console line a step.
COMMON_DEFAULTS: dict[str, Any] = {
    "trainer": {"use_v1": False, "logger": ["console"]},  # verl's default adds wandb: opt in to it
    "reward": {"num_workers": 0},
    "actor_rollout_ref": {
        "rollout": {"agent": {"agent_loop_manager_class": "lightning_otel.training.verl.trainer.RunnerGeneration"}}
    },
}


def gpu_defaults() -> dict[str, Any]:
    """On a GPU machine: verl's vLLM replicas, one tensor-parallel rank each, every visible GPU of this node
    (verl's own defaults are TP 2 on 8 GPUs and no rollout name)."""
    import torch

    return {
        "trainer": {"n_gpus_per_node": max(1, torch.cuda.device_count())},
        "actor_rollout_ref": {"rollout": {"name": "vllm", "tensor_model_parallel_size": 1}},
    }


def verl_config_dir() -> str:
    import verl

    return os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def user_layer(config: Mapping[str, Any] | DictConfig | None, overrides: Sequence[str]) -> DictConfig:
    """What the user set: `config` with the `key=value` overrides on top (values parsed as YAML)."""
    for override in overrides:
        if "=" not in override:
            raise ValueError(f"verl override {override!r} is not key=value")
    plain = OmegaConf.to_container(config) if isinstance(config, DictConfig) else dict(config or {})
    dotlist = OmegaConf.from_dotlist([override.lstrip("+") for override in overrides])
    return OmegaConf.merge(OmegaConf.create(plain), dotlist)  # type: ignore[return-value]


def compose_verl_config(
    config: Mapping[str, Any] | DictConfig | None = None,
    *,
    overrides: Sequence[str] = (),
    cpu: bool | None = None,
) -> DictConfig:
    """verl's full config: verl's defaults <- CPU or GPU defaults <- `config` <- `overrides` (`key=value` strings),
    then checked and completed before anything starts (config_checks.py)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from lightning_otel.training.verl.config_checks import check_config

    cpu = on_cpu() if cpu is None else cpu
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        base = compose(config_name="ppo_trainer")
    user = user_layer(config, overrides)
    # Keys verl's schema lacks (e.g. `override_config.attn_implementation`) are allowed, as hydra's `+key=` does.
    OmegaConf.set_struct(base, False)
    composed = OmegaConf.merge(base, COMMON_DEFAULTS, CPU_DEFAULTS if cpu else gpu_defaults(), user)
    return check_config(composed, user, cpu=cpu)  # type: ignore[arg-type]
