"""`VERL`: train the user's agents with verl (GRPO and verl's other estimators) on samples selected from their traces.

    trainer = lightning_otel.Trainer(
        n_runners=4,
        algorithm=lightning_otel.VERL(verl_config),        # verl's dict: algorithm / data / actor_rollout_ref / trainer
        adapter={"agent_match": "write"},
        initial_resources={"main_llm": lightning_otel.LLM("http://unused/v1", "policy")},  # replaced by the gateway
    )
    trainer.fit(sql_agent, train_tasks, val_tasks)

What happens: verl starts its workers and rollout replicas (vLLM on GPU; our `hf` CPU replica otherwise, through
verl's plugin points: lightning_otel.training.verl.cpu). A policy gateway in front of the replicas becomes the
`main_llm` resource every runner sees. Each step, the batch's tasks are queued `rollout.n` times (one group per
task), the runners' agents call the gateway, their spans reach the collector, `agent_match` selects the calls that
become rows, and verl's own step code (old log-probs, reference, advantages, actor update, weight sync) learns from
them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from lightning_otel.runtime.algorithm import Algorithm, TrainingRun
from lightning_otel.runtime.resources import ProxyLLM

log = logging.getLogger("lightning_otel.verl")

CPU_BACKEND_MODULE = "lightning_otel.training.verl.cpu"
# Set in the driver and in every Ray process before verl resolves its platform (it caches the first answer).
CPU_ENV = {
    "VERL_PLATFORM": "cpu",
    "VERL_USE_EXTERNAL_MODULES": CPU_BACKEND_MODULE,
    "VERL_ENGINE_DEVICE": "cuda",
    "TORCH_COMPILE_DISABLE": "1",
}


def _task_batch(items: list[Any]) -> list[Any]:
    """The dataloader's collate: a step's tasks, as they are (runners get each task as given)."""
    return list(items)


class VERL(Algorithm):
    """An `Algorithm` that runs verl 0.9's training step on trace-derived samples.

    `config`: verl's configuration as a dict (or DictConfig), merged over verl's defaults; `overrides`: `key=value`
    strings applied last (what `lightning-otel train` passes). `policy_resource`: the resource name the agents read the
    policy endpoint from. `group_by_agent`: GRPO groups per task *and* agent (multi-agent rollouts whose agents are
    rewarded differently). `advantage_per`: with GRPO, "rollout" (default) normalises over the group's rollouts, each
    counted once whatever its number of rows; "row" is verl's own (every row counts). `negative_advantage_weight`:
    multiplies the negative advantages of any estimator (1: the estimator's own update; 0: only rollouts better than
    their group's mean are reinforced, the setting of examples/spider's tiny CPU policy). `device`: "cpu" or "cuda";
    default: cuda when torch sees a GPU. `gateway_host`/`gateway_port`: where the policy gateway listens (loopback
    and a free port by default; "0.0.0.0" for runners on other machines, which then get this host's name).
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        overrides: Sequence[str] = (),
        policy_resource: str = "main_llm",
        group_by_agent: bool = False,
        advantage_per: str = "rollout",
        negative_advantage_weight: float = 1.0,
        device: str | None = None,
        on_step: Callable[[int, dict[str, float]], None] | None = None,
        rollout_timeout_s: float | None = None,
        gateway_host: str = "127.0.0.1",
        gateway_port: int = 0,
    ) -> None:
        if device not in (None, "cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        if not 0.0 <= negative_advantage_weight <= 1.0:
            raise ValueError(f"negative_advantage_weight must be in [0, 1], got {negative_advantage_weight!r}")
        self.config = config
        self.overrides = list(overrides)
        self.policy_resource = policy_resource
        self.group_by_agent = group_by_agent
        self.advantage_per = advantage_per
        self.negative_advantage_weight = negative_advantage_weight
        self.device = device
        self.on_step = on_step
        self.rollout_timeout_s = rollout_timeout_s
        self.gateway_host, self.gateway_port = gateway_host, gateway_port
        self.trainer: Any = None

    def run(self, run: TrainingRun, train_dataset: Sequence[Any] | None, val_dataset: Sequence[Any] | None) -> Any:
        if not train_dataset:
            raise ValueError("VERL needs a non-empty train dataset")
        cpu = self.device == "cpu" if self.device else _no_gpu()
        if cpu:
            _prepare_cpu_driver()
        from lightning_otel.training.verl.config import compose_verl_config
        from lightning_otel.training.verl.config_checks import check_model_path

        config = compose_verl_config(self.config, overrides=self.overrides, cpu=cpu)
        check_model_path(config)  # seconds, not a Ray worker's traceback a minute later
        with _ray_session(config, cpu):
            self.trainer = trainer = _build_trainer(config, list(train_dataset), list(val_dataset or []))
            trainer.init_workers()
            with self._gateway(run, trainer, config) as gateway:
                return trainer.fit_traces(
                    run,
                    gateway,
                    group_by_agent=self.group_by_agent,
                    advantage_per=self.advantage_per,
                    negative_advantage_weight=self.negative_advantage_weight,
                    on_step=self.on_step,
                    rollout_timeout_s=self.rollout_timeout_s,
                )

    @contextlib.contextmanager
    def _gateway(self, run: TrainingRun, trainer: Any, config: Any) -> Iterator[Any]:
        """The policy gateway over verl's replicas, published as the policy resource; its spans go to the collector."""
        from lightning_otel.serving.gateway import advertised_url, gateway_for_run

        rollout = config.actor_rollout_ref.rollout
        replicas = [f"http://{address}/v1" for address in trainer.llm_server_manager.get_addresses()]
        sampling = {"temperature": rollout.temperature, "top_p": rollout.top_p, "max_tokens": rollout.response_length}
        val = rollout.val_kwargs
        validation = {"temperature": val.temperature, "top_p": val.top_p, "max_tokens": rollout.response_length}
        model = _served_model(replicas[0])
        served = gateway_for_run(
            run, replicas, sampling=sampling, validation_sampling=validation, model=model,
            host=self.gateway_host, port=self.gateway_port,
            paused=True,  # until the first step: the replicas get the actor's weights first
        )  # fmt: skip
        with served as (gateway, server):
            # ProxyLLM: get_base_url(rollout_id, attempt_id) puts the rollout in the path (bare clients)
            policy = ProxyLLM(advertised_url(server.host, server.port), model, sampling_parameters=sampling)
            run.update_resources({**run.latest_resources(), self.policy_resource: policy})
            log.info("policy gateway %s over replicas %s", server.base_url, replicas)
            yield gateway


def _served_model(replica: str) -> str:
    """The model name a replica serves (vLLM: the model's local path), from its /v1/models."""
    import httpx

    return str(httpx.get(f"{replica}/models", timeout=60).json()["data"][0]["id"])


def _no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def _prepare_cpu_driver() -> None:
    """The CPU backend in this process too: verl resolves its platform once, at its first device question."""
    os.environ.update(CPU_ENV)
    import verl.plugin.platform.platform_manager as platform_manager

    import lightning_otel.training.verl.cpu  # noqa: F401  (registers the cpu platform and the hf rollout; patches)

    platform_manager._current_platform = None  # a platform resolved before the environment was set is forgotten


@contextlib.contextmanager
def _ray_session(config: Any, cpu: bool) -> Iterator[None]:
    """Ray as verl's `run_ppo` starts it (its runtime env, `ray_kwargs.ray_init`), plus the CPU backend's env."""
    import ray
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    if ray.is_initialized():  # the caller's Ray: used as it is
        yield
        return
    runtime_env = get_ppo_ray_runtime_env(config)
    ray_init = OmegaConf.to_container(config.ray_kwargs.get("ray_init", {}), resolve=True) or {}
    runtime_env = OmegaConf.to_container(OmegaConf.merge(runtime_env, ray_init.pop("runtime_env", None) or {}))
    if cpu:
        runtime_env.setdefault("env_vars", {}).update(CPU_ENV)
    ray_init.setdefault("include_dashboard", False)
    ray.init(runtime_env=runtime_env, **ray_init)
    try:
        yield
    finally:
        ray.shutdown()


def _build_trainer(config: Any, train_tasks: list[Any], val_tasks: list[Any]) -> Any:
    """verl's trainer with its roles and resource pools as `main_ppo` sets them up; datasets are the task lists."""
    from omegaconf import OmegaConf
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo.utils import create_rl_sampler, need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import HFModelConfig

    from lightning_otel.training.verl.trainer import TraceRayPPOTrainer

    OmegaConf.resolve(config)
    roles = BaseTaskRunner()
    _, worker_group_cls = roles.add_actor_rollout_worker(config)
    if need_critic(config):
        roles.add_critic_worker(config)
    roles.add_reward_model_resource_pool(config)
    roles.add_teacher_model_resource_pool(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    model_config: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
    trainer = TraceRayPPOTrainer(
        config=config,
        tokenizer=model_config.tokenizer,
        processor=model_config.processor,
        role_worker_mapping=roles.role_worker_mapping,
        resource_pool_manager=roles.init_resource_pool_mgr(config),
        ray_worker_group_cls=worker_group_cls,
        train_dataset=train_tasks,
        val_dataset=val_tasks or train_tasks[:1],  # verl wants a loader; validation runs only on real val tasks
        collate_fn=_task_batch,
        train_sampler=create_rl_sampler(config.data, train_tasks),
    )
    trainer.val_tasks = val_tasks
    return trainer


__all__ = ["VERL"]
