"""`Tinker`: RL on the user's agents with a Tinker-shaped training engine (local LoRA, or the hosted Tinker service).

    engine = lightning_otel.LocalEngine("path/to/model", rank=32)         # or RemoteEngine("Qwen/Qwen3-4B-...")
    trainer = lightning_otel.Trainer(
        n_runners=2,
        algorithm=lightning_otel.Tinker(engine, batch_size=8, group_size=4, learning_rate=1e-4),
        adapter={"agent_match": "player"},
    )
    trainer.fit(agent, train_tasks, val_tasks)

Each step: the batch's tasks are queued `group_size` times (one group per task); the runners' agents call the policy
gateway, which serves the engine's current sampler in vLLM's format (token ids, logprobs, and the sampler's version
on every LLM span); the rollouts' spans are read in one call, `agent_match` selects the calls that become samples,
each sample becomes a datum from its captured token ids (never re-tokenized text; observation tokens weigh 0) with
its rollout's group-relative advantage, and the engine runs forward_backward + optim_step and hands back a sampler
of the new weights, which the gateway serves from the next request on.
"""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_otel.runtime.algorithm import Algorithm, BatchResult, TrainingRun
from lightning_otel.runtime.resources import ProxyLLM
from lightning_otel.runtime.sample_diagnosis import NothingTrained
from lightning_otel.training.tinker.datums import group_datums
from lightning_otel.training.tinker.engine import EngineSamplerReplica, TrainingEngine
from lightning_otel.training.tinker.metrics_log import MetricsLog
from lightning_otel.training.tinker.types import LOSS_INPUTS, AdamParams

log = logging.getLogger("lightning_otel.tinker")


@dataclass(slots=True)
class TinkerResult:
    """Per-step metrics (`steps`), validation reward by step (`validation`), where things were saved."""

    steps: list[dict[str, float]] = field(default_factory=list)
    validation: list[tuple[int, float]] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    train_seconds: float = 0.0

    def rewards(self) -> list[float]:
        return [step["reward/mean"] for step in self.steps]

    def metrics(self, window: int = 5) -> dict[str, float]:
        """Mean reward over the first and last `window` steps, and validation at the start and the end."""
        rewards = self.rewards()
        head, tail = rewards[:window], rewards[-window:]
        return {
            "steps": float(len(self.steps)),
            "trained_steps": float(sum(1 for step in self.steps if step["train/datums"] > 0)),
            "reward/first_steps": statistics.fmean(head) if head else math.nan,
            "reward/last_steps": statistics.fmean(tail) if tail else math.nan,
            "val/first": self.validation[0][1] if self.validation else math.nan,
            "val/last": self.validation[-1][1] if self.validation else math.nan,
            "train_seconds": self.train_seconds,
        }


class Tinker(Algorithm):
    """See the module docstring.

    `batch_size` tasks per step, each run `group_size` times; `max_steps` (default: `n_epochs` over the train set);
    `loss_fn`: "importance_sampling" (default), "ppo" (with `loss_fn_config` clip thresholds) or "cross_entropy";
    `adam`: the optimizer settings (or just `learning_rate`); `max_tokens`/`temperature`: the sampling enforced on
    every policy call while training (`val_temperature` during validation); `val_every` steps (and at step 0 and the
    end) on the val set; `save_every` steps a checkpoint (engine state) under the engine's log_dir;
    `keep_constant_groups`: train on groups whose rewards are all equal (they carry no advantage; dropped by
    default); `group_by_agent`: advantages per task and agent; `logger`: "console", "jsonl" (`log_dir`/metrics.jsonl)
    and VERL's trackers; `on_step(step, metrics)`: called after each step.
    """

    def __init__(
        self,
        engine: TrainingEngine,
        *,
        batch_size: int = 8,
        group_size: int = 4,
        n_epochs: int = 1,
        max_steps: int | None = None,
        loss_fn: str = "importance_sampling",
        loss_fn_config: Mapping[str, float] | None = None,
        learning_rate: float | None = None,
        adam: AdamParams | None = None,
        max_tokens: int = 64,
        temperature: float = 1.0,
        val_temperature: float = 0.0,
        val_every: int = 5,
        save_every: int = 0,
        keep_constant_groups: bool = False,
        group_by_agent: bool = False,
        policy_resource: str = "main_llm",
        model_name: str = "agl-policy",
        logger: Sequence[str] = ("console",),
        project_name: str = "lightning-otel",
        experiment_name: str | None = None,
        log_dir: str | Path | None = None,
        on_step: Callable[[int, dict[str, float]], None] | None = None,
        gateway_host: str = "127.0.0.1",
        gateway_port: int = 0,
    ) -> None:
        if loss_fn not in LOSS_INPUTS:
            raise ValueError(f"loss_fn must be one of {', '.join(LOSS_INPUTS)}, got {loss_fn!r}")
        if group_size < 1 or batch_size < 1:
            raise ValueError("batch_size and group_size must be >= 1")
        if adam is not None and learning_rate is not None:
            raise ValueError("pass learning_rate or adam, not both")
        self.engine = engine
        self.batch_size, self.group_size, self.n_epochs, self.max_steps = batch_size, group_size, n_epochs, max_steps
        self.loss_fn, self.loss_fn_config = loss_fn, dict(loss_fn_config or {})
        self.adam = adam or AdamParams(learning_rate=learning_rate if learning_rate is not None else 1e-4)
        self.sampling = {"temperature": temperature, "top_p": 1.0, "max_tokens": max_tokens}
        self.validation_sampling = {"temperature": val_temperature, "top_p": 1.0, "max_tokens": max_tokens}
        self.val_every, self.save_every = val_every, save_every
        self.keep_constant_groups, self.group_by_agent = keep_constant_groups, group_by_agent
        self.policy_resource, self.model_name = policy_resource, model_name
        self.logger, self.project_name, self.experiment_name = list(logger), project_name, experiment_name
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.on_step = on_step
        self.gateway_host, self.gateway_port = gateway_host, gateway_port

    def run(
        self, run: TrainingRun, train_dataset: Sequence[Any] | None, val_dataset: Sequence[Any] | None
    ) -> TinkerResult:
        tasks, val_tasks = list(train_dataset or []), list(val_dataset or [])
        if not tasks:
            raise ValueError("Tinker needs a non-empty train dataset")
        if self.save_every and getattr(self.engine, "log_dir", "") is None:  # before any step, not at the first save
            raise ValueError("save_every needs an engine with a log_dir to save its state in")
        batches = self._batches(tasks)
        metrics_log = MetricsLog(
            self.logger, project=self.project_name, experiment=self.experiment_name or run.run_id,
            log_dir=self.log_dir, config=self._config(),
        )  # fmt: skip
        result = TinkerResult()
        started = time.monotonic()
        replica = EngineSamplerReplica(
            self.engine.save_weights_and_get_sampler("step-0"), self.engine.chat_tokenizer, model_name=self.model_name
        )
        with contextlib.closing(metrics_log), self._served(run, replica) as gateway:
            if val_tasks:
                result.validation.append((0, self._validate(run, gateway, val_tasks)))
                metrics_log.log(0, {"val/reward_mean": result.validation[-1][1]})
            for step, step_tasks in enumerate(batches, start=1):
                run.policy_version = replica.weight_version
                metrics = self._step(run, replica, step_tasks)
                if val_tasks and (step % self.val_every == 0 or step == len(batches)):
                    result.validation.append((step, self._validate(run, gateway, val_tasks)))
                    metrics["val/reward_mean"] = result.validation[-1][1]
                if self.save_every and (step % self.save_every == 0 or step == len(batches)):
                    result.checkpoints.append(self.engine.save_state(f"step-{step}"))
                result.steps.append(metrics)
                metrics_log.log(step, metrics)
                if self.on_step is not None:
                    self.on_step(step, metrics)
        result.train_seconds = time.monotonic() - started
        if not any(step["train/datums"] for step in result.steps):
            total = {key: sum(int(s[key]) for s in result.steps) for key in (
                "rollouts", "failed", "train/samples", "train/constant_groups", "calls_without_token_ids")}  # fmt: skip
            raise NothingTrained(
                f"{len(result.steps)} steps, none trained: {total['rollouts']} rollouts ({total['failed']} failed), "
                f"{total['train/samples']} samples selected, {total['train/constant_groups']} groups whose rewards "
                f"were all equal, {total['calls_without_token_ids']} calls without token ids. Check agent_match "
                "with Trainer.dev, and a reward that varies between attempts"
            )
        return result

    def _step(self, run: TrainingRun, replica: EngineSamplerReplica, tasks: list[Any]) -> dict[str, float]:
        began = time.monotonic()
        batch = run.run_batch(tasks, n=self.group_size, mode="train")
        rollout_s = time.monotonic() - began
        groups = batch.groups(by_agent=True) if self.group_by_agent else batch.groups()
        built = group_datums(
            groups, batch.rewards(), loss_fn=self.loss_fn, keep_constant_groups=self.keep_constant_groups
        )
        metrics = _batch_metrics(batch)
        metrics.update({
            "train/samples": float(sum(len(triplets) for triplets in groups.values())),
            "train/datums": float(len(built.datums)),
            "train/tokens": float(built.trained_tokens),
            "train/groups": float(built.groups),
            "train/constant_groups": float(built.constant_groups),
            "policy/version": float(replica.weight_version),
            "time/rollouts_s": rollout_s,
        })  # fmt: skip
        if not built.datums:
            log.warning(
                "step trained nothing: %d groups, %d with equal rewards, %d samples without logprobs, "
                "%d rollouts without samples", built.groups, built.constant_groups, built.samples_without_logprobs,
                int(metrics["rollouts_without_samples"]),
            )  # fmt: skip
            return metrics
        began = time.monotonic()
        output = self.engine.forward_backward(built.datums, self.loss_fn, self.loss_fn_config)
        optim = self.engine.optim_step(self.adam)
        replica.use(self.engine.save_weights_and_get_sampler(f"step-{replica.weight_version + 1}"))
        metrics.update({
            "train/loss_sum": output.metrics.get("loss:sum", math.nan),
            "train/grad_norm": optim.metrics.get("grad_norm", math.nan),
            "time/train_s": time.monotonic() - began,
        })  # fmt: skip
        return metrics

    def _validate(self, run: TrainingRun, gateway: Any, tasks: list[Any]) -> float:
        gateway.set_mode("val")
        try:
            batch = run.run_batch(tasks, n=1, mode="val")
        finally:
            gateway.set_mode("train")
        rewards = [reward for reward in batch.rewards().values() if reward is not None]
        if not rewards:
            log.warning("validation: no rollout succeeded with a reward (%s)", _batch_metrics(batch))
        return statistics.fmean(rewards) if rewards else math.nan

    @contextlib.contextmanager
    def _served(self, run: TrainingRun, replica: EngineSamplerReplica) -> Iterator[Any]:
        """The sampler behind a replica server, behind the policy gateway, published as the policy resource."""
        from lightning_otel.serving.gateway import advertised_url, gateway_for_run
        from lightning_otel.serving.sampler_api import ReplicaServer

        with ReplicaServer(replica) as replica_server, gateway_for_run(
            run, [replica_server.base_url], sampling=self.sampling, validation_sampling=self.validation_sampling,
            model=self.model_name, host=self.gateway_host, port=self.gateway_port,
        ) as (gateway, server):  # fmt: skip
            policy = ProxyLLM(advertised_url(server.host, server.port), self.model_name,
                              sampling_parameters=self.sampling)  # fmt: skip
            run.update_resources({**run.latest_resources(), self.policy_resource: policy})
            log.info("policy gateway %s over the %s sampler", server.base_url, self.engine.base_model)
            yield gateway

    def _batches(self, tasks: list[Any]) -> list[list[Any]]:
        per_epoch = [tasks[start : start + self.batch_size] for start in range(0, len(tasks), self.batch_size)]
        batches = [batch for _ in range(self.n_epochs) for batch in per_epoch]
        if self.max_steps is not None:
            while len(batches) < self.max_steps:  # more steps than the epochs give: go round again
                batches += per_epoch
            batches = batches[: self.max_steps]
        return batches

    def _config(self) -> dict[str, Any]:
        return {
            "base_model": self.engine.base_model, "batch_size": self.batch_size, "group_size": self.group_size,
            "loss_fn": self.loss_fn, "learning_rate": self.adam.learning_rate, **self.sampling,
        }  # fmt: skip


def _batch_metrics(batch: BatchResult) -> dict[str, float]:
    raw = batch.metrics()
    runners = {runner for runner in batch.runners().values() if runner}
    return {
        "reward/mean": raw["reward_mean"],
        "rollouts": float(raw["rollouts"]),
        "succeeded": float(raw["succeeded"]),
        "failed": float(raw["failed"] + raw["timeout"] + raw["cancelled"]),
        "rollouts_without_samples": float(raw["rollouts_without_triplets"]),
        "calls_without_token_ids": float(raw["calls_without_token_ids"]),
        "runners": float(len(runners)),
    }
