"""The one module that touches verl's private objects, on the release they were tested with (verl 0.9.1: the `[verl]`
extra pins it exactly, and any other release is refused here with that reason).

Under the training loop, verl is the engine of the `VERL` backend through the pieces of its legacy trainer
(`RayPPOTrainer`, still shipped and marked deprecated in 0.9.1): worker groups for the actor, reference and critic,
their log-prob, value and update calls, the rollout replicas' manager, weight sync and checkpoints. Why these and
not the v1 trainer's: the README's VERL page (measured). The CPU backend (`cpu/`) registers its platform and rollout
through verl's plugin points: the registrations below, undone in the driver when a run ends (`cpu.cpu_driver`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from lightning_otel.capture.tested_versions import installed_version, is_tested


def require_tested_verl() -> None:
    if not is_tested("verl"):
        raise RuntimeError(
            f"verl {installed_version('verl')} is installed; lightning-otel's VERL backend uses verl's internals as "
            "they are in verl 0.9.1: pip install 'lightning-otel[verl]' (it pins verl==0.9.1)"
        )


# --- the legacy trainer's pieces (a RayPPOTrainer built like main_ppo_v0 builds it) ---------------------------------
def build_trainer(config: Any, train_tasks: list[Any], val_tasks: list[Any], collate_fn: Callable) -> Any:
    """verl's trainer with its roles and resource pools as `main_ppo` sets them up; datasets are task lists (its
    dataloader fixes the step count its LR schedule uses and is saved in checkpoints; the loop schedules the tasks)."""
    from omegaconf import OmegaConf
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.utils import create_rl_sampler, need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import HFModelConfig

    OmegaConf.resolve(config)
    roles = BaseTaskRunner()
    _, worker_group_cls = roles.add_actor_rollout_worker(config)
    if need_critic(config):
        roles.add_critic_worker(config)
    roles.add_reward_model_resource_pool(config)
    roles.add_teacher_model_resource_pool(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    model_config: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
    return RayPPOTrainer(
        config=config,
        tokenizer=model_config.tokenizer,
        processor=model_config.processor,
        role_worker_mapping=roles.role_worker_mapping,
        resource_pool_manager=roles.init_resource_pool_mgr(config),
        ray_worker_group_cls=worker_group_cls,
        train_dataset=train_tasks,
        val_dataset=val_tasks or train_tasks[:1],  # verl wants a loader; the loop validates on the real val tasks
        collate_fn=collate_fn,
        train_sampler=create_rl_sampler(config.data, train_tasks),
    )


def validate(config: Any) -> None:
    """verl's own config validation, in the driver before Ray starts (its trainer runs it again later); what it
    refuses is a ValueError naming verl's check."""
    import copy

    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    config = copy.deepcopy(config)  # resolved here only
    OmegaConf.resolve(config)
    try:
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))  # fmt: skip
    except (AssertionError, ValueError) as exc:
        raise ValueError(f"verl's config check refused it: {exc}") from None


def old_log_prob(trainer: Any, batch: Any) -> Any:
    output, _ = trainer._compute_old_log_prob(batch)
    output.batch.pop("entropys")
    return output


def ref_log_prob(trainer: Any, batch: Any) -> Any:
    return trainer._compute_ref_log_prob(batch)


def values(trainer: Any, batch: Any) -> Any:
    return trainer._compute_values(batch)


def update_critic(trainer: Any, batch: Any) -> Any:
    return trainer._update_critic(batch)


def data_parallel_size(trainer: Any) -> int:
    return int(trainer._get_dp_size(trainer.actor_rollout_wg, "actor"))


def save_checkpoint(trainer: Any, step: int) -> str:
    trainer.global_steps = step
    trainer._save_checkpoint()
    return os.path.join(str(trainer.config.trainer.default_local_dir), f"global_step_{step}")


def load_checkpoint(trainer: Any) -> int:
    """The step of the checkpoint `trainer.resume_mode` asks for (0: none, a fresh start)."""
    trainer.global_steps = 0
    trainer._load_checkpoint()
    return int(trainer.global_steps)


# --- the CPU backend's registrations ---------------------------------------------------------------------------------
def resolved_platform() -> Any:
    """The platform verl resolved in this process (it caches its first answer), None if none yet."""
    import verl.plugin.platform.platform_manager as platform_manager

    return platform_manager._current_platform


def set_resolved_platform(platform: Any) -> None:
    """None: verl resolves its platform again on its next device question."""
    import verl.plugin.platform.platform_manager as platform_manager

    platform_manager._current_platform = platform


def register_rollout(name: str, replica_loader: Callable[[], type], rollout_class: str) -> Callable[[], None]:
    """Our rollout engine under `rollout.name=name`; returns the undo."""
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    table = rollout_base._ROLLOUT_REGISTRY
    key = (name, "async")
    before_replica, before_class = RolloutReplicaRegistry._registry.get(name), table.get(key)
    RolloutReplicaRegistry.register(name, replica_loader)
    table[key] = rollout_class

    def undo() -> None:
        _restore(RolloutReplicaRegistry._registry, name, before_replica)
        _restore(table, key, before_class)

    return undo


def register_platform(name: str, platform: type) -> Callable[[], None]:
    from verl.plugin.platform.platform_manager import PlatformRegistry

    before = PlatformRegistry._platforms.get(name)
    PlatformRegistry.register(platform=name)(platform)
    return lambda: _restore(PlatformRegistry._platforms, name, before)


def _restore(table: dict, key: Any, value: Any) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
