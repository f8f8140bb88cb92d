"""`VERL`: train the user's agents with verl (GRPO and verl's other estimators) on samples selected from their traces.

    trainer = lightning_otel.Trainer(
        n_runners=4,
        algorithm=lightning_otel.VERL(verl_config),        # verl's dict: algorithm / data / actor_rollout_ref / trainer
        adapter={"agent_match": "write"},
        initial_resources={"main_llm": lightning_otel.LLM("http://unused/v1", "policy")},  # replaced by the gateway
    )
    trainer.fit(sql_agent, train_tasks, val_tasks)

What happens: verl starts its workers and rollout replicas (vLLM on GPU; our `hf` CPU replica otherwise, through
verl's plugin points: lightning_otel.training.verl.cpu), and the training loop (`lightning_otel.training.loop`) runs
with verl as its backend: a policy gateway in front of the replicas becomes the `main_llm` resource every runner
sees; each step, the batch's tasks are queued `rollout.n` times (one group per task), the runners' agents call the
gateway, their spans reach the collector, `agent_match` selects the calls that become rows, the loop's estimator
gives each its advantage (GRPO per rollout by default), and verl's own step code (old log-probs, reference, actor
update, weight sync) learns from them. verl's config names map to the loop's schedule: `data.train_batch_size`,
`rollout.n`, `trainer.total_epochs`/`total_training_steps`, `test_freq`, `val_before_train`, `save_freq`,
`data.shuffle`/`seed`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from lightning_otel.runtime.algorithm import Algorithm
from lightning_otel.runtime.ray_address import joins_a_cluster, ray_init_address
from lightning_otel.runtime.training_run import TrainingRun
from lightning_otel.training.loop.loop import TrainingLoop
from lightning_otel.training.loop.options import Sampling, Trackers, TrainingOptions, with_moved_arguments
from lightning_otel.training.loop.result import TrainingResult
from lightning_otel.training.loop.schedule import Schedule
from lightning_otel.training.loop.staleness import require_async_support

log = logging.getLogger("lightning_otel.verl")

CPU_BACKEND_MODULE = "lightning_otel.training.verl.cpu"
# Set in the driver (for the run only) and in every Ray process before verl resolves its platform (it caches the
# first answer).
CPU_ENV = {
    "VERL_PLATFORM": "cpu",
    "VERL_USE_EXTERNAL_MODULES": CPU_BACKEND_MODULE,
    "VERL_ENGINE_DEVICE": "cuda",
    "TORCH_COMPILE_DISABLE": "1",
}


class VERL(Algorithm):
    """An `Algorithm` that runs verl 0.9's training step on trace-derived samples.

    `config`: verl's configuration as a dict (or DictConfig), merged over verl's defaults; `options`: the training
    loop's settings (`TrainingOptions`: advantage, group_by_agent, max_staleness, collect_timeout_s,
    policy_resource, gateway_host/port, on_step); the schedule, the sampling and the trackers are verl's config's
    (`data.train_batch_size`, `rollout.n`, `trainer.total_epochs`, `test_freq`, `save_freq`, the rollout's
    temperatures, `trainer.logger`). `overrides`: `key=value` strings applied to the config last (what `lightning-otel
    train` passes). `advantage_per`: with GRPO, "rollout" (default) normalises over the group's rollouts, each
    counted once whatever its number of rows; "row" is verl's own (every row counts). `negative_advantage_weight`:
    multiplies the negative advantages of any estimator (1: the estimator's own update; 0: only rollouts better than
    their group's mean are reinforced, the setting of examples/spider's tiny CPU policy). `options.advantage`
    "anchor" (per-call credit) or an estimator of your own needs `algorithm.adv_estimator=grpo`: the loop's
    estimators replace verl's. `device`: "cpu" or "cuda"; default: cuda when torch sees a GPU. Asynchronous training
    (`options.max_staleness` >= 1) needs the CPU replicas (vLLM replicas sleep while the colocated actor trains); its
    off-policy correction is verl's own: `algorithm.rollout_correction.rollout_is=token`.
    """

    shows_progress: ClassVar[bool] = True  # the loop's step bar (trackers' console)
    why_one_policy: ClassVar[str] = (
        "verl 0.9 trains one actor; a LoRA adapter per agent on vLLM's multi-LoRA serving is designed (docs: 'A policy "
        "per agent', VERL) but not built: train a policy per agent with Tinker (LocalEngine on this machine)"
    )

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        options: TrainingOptions | None = None,
        *,
        overrides: Sequence[str] = (),
        advantage_per: str = "rollout",
        negative_advantage_weight: float = 1.0,
        device: str | None = None,
        val_sampled: int = 0,
        max_seconds: float | None = None,
        **moved: Any,
    ) -> None:
        if device not in (None, "cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        if not 0.0 <= negative_advantage_weight <= 1.0:
            raise ValueError(f"negative_advantage_weight must be in [0, 1], got {negative_advantage_weight!r}")
        if advantage_per not in ("rollout", "row"):
            raise ValueError(f"advantage_per must be 'rollout' or 'row', got {advantage_per!r}")
        self.options = with_moved_arguments("VERL", options, moved)
        self.options.refuse(
            "VERL",
            schedule="verl's config (data.train_batch_size, actor_rollout_ref.rollout.n, trainer.total_epochs, "
            "trainer.test_freq, trainer.save_freq)",
            sampling="verl's config (actor_rollout_ref.rollout.temperature, top_p, response_length)",
            validation_sampling="verl's config (actor_rollout_ref.rollout.val_kwargs)",
        )
        self.config = config
        self.overrides = list(overrides)
        self.advantage_per = advantage_per
        self.negative_advantage_weight = negative_advantage_weight
        self.device = device
        self.val_sampled, self.max_seconds = val_sampled, max_seconds
        self.backend: Any = None  # the run's VERLBackend (verl's workers), while it runs

    def run(
        self, run: TrainingRun, train_dataset: Sequence[Any] | None, val_dataset: Sequence[Any] | None
    ) -> TrainingResult:
        if not train_dataset:
            raise ValueError("VERL needs a non-empty train dataset")
        from omegaconf import OmegaConf

        from lightning_otel.training.verl import verl_internals
        from lightning_otel.training.verl.config import compose_verl_config
        from lightning_otel.training.verl.config_checks import check_batch_sizes, check_model_path
        from lightning_otel.training.verl.cpu import ROLLOUT_NAME as CPU_ROLLOUT
        from lightning_otel.training.verl.cpu import cpu_driver  # imported before the CPU environment is set
        from lightning_otel.training.verl.trainer import VERLBackend

        with contextlib.ExitStack() as stack:
            # verl (importing its engines) and Ray (starting) set environment variables in this process: undone
            stack.enter_context(_environment_kept())
            cpu = self.device == "cpu" if self.device else _no_gpu()
            config = compose_verl_config(self.config, overrides=self.overrides, cpu=cpu)
            check_model_path(config)  # seconds, not a Ray worker's traceback a minute later
            check_batch_sizes(config)
            verl_internals.validate(config)
            rollout = config.actor_rollout_ref.rollout
            # before Ray and verl's workers start: said in a second, not after minutes
            require_async_support(self.options.max_staleness, "verl", str(rollout.name) == CPU_ROLLOUT,
                                  f"verl's {rollout.name!r} replicas sleep beside the colocated actor; the CPU "
                                  f"rollout ({CPU_ROLLOUT!r}) serves while it trains")  # fmt: skip
            train_tasks, val_tasks = list(train_dataset), list(val_dataset or [])
            if cpu:
                stack.enter_context(cpu_driver(CPU_ENV))
            stack.enter_context(_ray_session(config, cpu))
            self.backend = backend = VERLBackend(
                config, train_tasks, val_tasks, advantage_per=self.advantage_per,
                negative_advantage_weight=self.negative_advantage_weight,
            )  # fmt: skip
            options = self.options.with_defaults(
                schedule=replace(
                    self.schedule(config, backend.total_steps),
                    val_sampled=self.val_sampled,
                    max_seconds=self.max_seconds,
                ),
                sampling=_sampling(rollout, validation=False),
                validation_sampling=_sampling(rollout, validation=True),
                trackers=Trackers(
                    tuple(config.trainer.logger or ()),
                    project=str(config.trainer.project_name),
                    experiment=str(config.trainer.experiment_name),
                    log_dir=_metrics_dir(config),
                ),
            )
            loop = TrainingLoop(backend, options, run_config=OmegaConf.to_container(config, resolve=True))
            return loop.run(run, train_tasks, val_tasks)

    @staticmethod
    def schedule(config: Any, total_steps: int) -> Schedule:
        """verl's names for the loop's schedule (verl's dataloader drops an epoch's last, smaller batch)."""
        trainer, data = config.trainer, config.data
        return Schedule(
            batch_size=int(data.train_batch_size),
            group_size=int(config.actor_rollout_ref.rollout.n),
            epochs=int(trainer.total_epochs),
            max_steps=total_steps,
            shuffle=bool(data.get("shuffle", True)),
            seed=int(data.get("seed") or 0),
            drop_last=True,
            val_every=max(0, int(trainer.test_freq)),
            val_at_start=bool(trainer.get("val_before_train", True)),
            val_group_size=int(config.actor_rollout_ref.rollout.val_kwargs.get("n", 1)),
            save_every=max(0, int(trainer.save_freq)),
        )


def _sampling(rollout: Any, *, validation: bool) -> Sampling:
    source = rollout.val_kwargs if validation else rollout
    return Sampling(float(source.temperature), float(source.top_p), int(rollout.response_length))


@contextlib.contextmanager
def _environment_kept() -> Iterator[None]:
    """The process's environment variables as they were before the run, whatever the run's libraries set."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        os.environ.update(saved)


def _no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


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
    ray_init["address"] = ray_init_address(ray_init.get("address"))  # never a stray `ray start`'s cluster
    if joins_a_cluster(ray_init["address"]):  # a running cluster's resources are its own (ray.init refuses these)
        for key in ("num_cpus", "num_gpus", "resources", "object_store_memory"):
            ray_init.pop(key, None)
    else:
        ray_init.setdefault("include_dashboard", False)
    ray.init(runtime_env=runtime_env, **ray_init)
    try:
        yield
    finally:
        ray.shutdown()


def _metrics_dir(config: Any) -> Path | None:
    """Where the "jsonl" logger writes metrics.jsonl: `trainer.default_local_dir`, beside the checkpoints."""
    folder = config.trainer.get("default_local_dir")
    return Path(str(folder)) if folder and "jsonl" in (config.trainer.logger or ()) else None


__all__ = ["VERL"]
