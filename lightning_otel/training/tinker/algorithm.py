"""`Tinker`: RL on the user's agents with a Tinker-shaped training engine (local LoRA, or the hosted Tinker service).

    engine = lightning_otel.LocalEngine("path/to/model", rank=32)         # or RemoteEngine("Qwen/Qwen3-4B-...")
    trainer = lightning_otel.Trainer(
        n_runners=2,
        algorithm=lightning_otel.Tinker(engine, batch_size=8, group_size=4, learning_rate=1e-4),
        adapter={"agent_match": "player"},
    )
    trainer.fit(agent, train_tasks, val_tasks)

It runs the training loop (`lightning_otel.training.loop`) with the engine as its backend: each step, the batch's tasks
are queued `group_size` times (one group per task); the runners' agents call the policy gateway, which serves the
engine's current sampler in vLLM's format (token ids, logprobs, and the sampler's version on every LLM span); the
rollouts' spans are read in one call, `agent_match` selects the calls that become samples, each gets its rollout's
group-relative advantage (reward - the group's mean), becomes a datum from its captured token ids (never
re-tokenized text; observation tokens weigh 0), and the engine runs forward_backward + optim_step and hands back a
sampler of the new weights, which the gateway serves from the next step on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from lightning_otel.runtime.algorithm import Algorithm, TrainingRun
from lightning_otel.training.loop.advantages import AdvantageEstimator, GroupAdvantage, UniformWeight
from lightning_otel.training.loop.credit import advantage_estimator
from lightning_otel.training.loop.loop import LoopResult, TrainingLoop
from lightning_otel.training.loop.metrics import MetricsLog
from lightning_otel.training.loop.schedule import Schedule
from lightning_otel.training.tinker.backend import TinkerBackend
from lightning_otel.training.tinker.datums import COOKBOOK_ADVANTAGE
from lightning_otel.training.tinker.engine import TrainingEngine
from lightning_otel.training.tinker.types import LOSS_INPUTS, AdamParams

# Tinker's earlier names for the loop's metrics, kept in `TinkerResult.steps` (the trackers get the loop's names).
EARLIER_NAMES = {
    "reward/mean": "rollout/reward_mean",
    "rollouts": "rollout/rollouts",
    "succeeded": "rollout/succeeded",
    "rollouts_without_samples": "rollout/rollouts_without_triplets",
    "calls_without_token_ids": "rollout/calls_without_token_ids",
    "runners": "rollout/runners",
    "policy/version": "training/policy_version",
    "train/samples": "training/samples",
    "train/constant_groups": "rollout/zero_variance_groups",
    "time/rollouts_s": "timing_s/gen",
    "time/train_s": "timing_s/update",
}


def with_earlier_names(metrics: Mapping[str, float]) -> dict[str, float]:
    named = {earlier: metrics[name] for earlier, name in EARLIER_NAMES.items() if name in metrics}
    named["failed"] = sum(metrics.get(f"rollout/{key}", 0.0) for key in ("failed", "timeout", "cancelled"))
    return {**named, **metrics}


@dataclass(slots=True)
class TinkerResult:
    """Per-step metrics (`steps`), validation reward by step (`validation`), where things were saved."""

    steps: list[dict[str, float]] = field(default_factory=list)
    validation: list[tuple[int, float]] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    train_seconds: float = 0.0
    loop: LoopResult | None = None  # the loop's records: skipped steps' reasons, sampled rollouts, ...

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


# Tinker's earlier keywords for the schedule's fields (still accepted), and its defaults for them.
SCHEDULE_SHORTHANDS = {
    "batch_size": "batch_size", "group_size": "group_size", "n_epochs": "epochs", "max_steps": "max_steps",
    "val_every": "val_every", "save_every": "save_every",
}  # fmt: skip
DEFAULT_SCHEDULE = Schedule(batch_size=8, group_size=4, val_every=5)


def _schedule(schedule: Schedule | None, shorthands: dict[str, Any]) -> Schedule:
    unknown = set(shorthands) - set(SCHEDULE_SHORTHANDS)
    if unknown:
        raise TypeError(f"Tinker() got unexpected keyword arguments {sorted(unknown)}")
    if schedule is not None and shorthands:
        raise TypeError(f"Tinker got schedule=Schedule(...) and {sorted(shorthands)}: set them in the schedule")
    fields = {SCHEDULE_SHORTHANDS[name]: value for name, value in shorthands.items()}
    return schedule or replace(DEFAULT_SCHEDULE, **fields)


class Tinker(Algorithm):
    """See the module docstring.

    `schedule`: the loop's `Schedule` (tasks per step, group size, steps, validation and checkpoint intervals); its
    fields by their earlier names still work: `batch_size` tasks per step (8), each run `group_size` times (4);
    `max_steps` (default: `n_epochs` over the train set);
    `loss_fn`: "importance_sampling" (default), "ppo" (with `loss_fn_config` clip thresholds) or "cross_entropy";
    `adam`: the optimizer settings (or just `learning_rate`); `max_tokens`/`temperature`: the sampling enforced on
    every policy call while training (`val_temperature` during validation); `val_every` steps (and at step 0 and the
    end) on the val set; `save_every` steps a checkpoint (engine state) under the engine's log_dir; `resume`: start
    after the latest of them; `keep_constant_groups`: train on groups whose rewards are all equal (they carry no
    advantage; dropped by default); `group_by_agent`: advantages per task and agent; `advantage`: "grpo" (reward -
    the group's mean, tinker-cookbook's; default) or "anchor" (per-call credit, `AnchorAdvantage` with the same
    baseline); `estimator`: another advantage estimator; `logger`: "console", "jsonl" (`log_dir`/metrics.jsonl) and
    VERL's trackers; `on_step(step, metrics)`: called after each step; `max_staleness`: 0 (synchronous steps) or k:
    asynchronous training, samples at most k policy versions old (see `lightning_otel.training.loop`); `tis_cap`:
    truncated importance sampling per token at this cap (importance_sampling only; off by default).
    """

    shows_progress: ClassVar[bool] = True  # the loop's step bar (trackers' console)

    def __init__(
        self,
        engine: TrainingEngine,
        *,
        schedule: Schedule | None = None,
        loss_fn: str = "importance_sampling",
        loss_fn_config: Mapping[str, float] | None = None,
        learning_rate: float | None = None,
        adam: AdamParams | None = None,
        max_tokens: int = 64,
        temperature: float = 1.0,
        val_temperature: float = 0.0,
        resume: bool = False,
        keep_constant_groups: bool = False,
        group_by_agent: bool = False,
        estimator: AdvantageEstimator | None = None,
        advantage: str = "grpo",
        policy_resource: str = "main_llm",
        model_name: str = "agl-policy",
        logger: Sequence[str] = ("console",),
        project_name: str = "lightning-otel",
        experiment_name: str | None = None,
        log_dir: str | Path | None = None,
        on_step: Callable[[int, dict[str, float]], None] | None = None,
        gateway_host: str = "127.0.0.1",
        gateway_port: int = 0,
        max_staleness: int = 0,
        tis_cap: float | None = None,
        **shorthands: Any,
    ) -> None:
        if tis_cap is not None and (loss_fn != "importance_sampling" or tis_cap <= 0):
            raise ValueError(f"tis_cap={tis_cap} needs loss_fn='importance_sampling' and a cap > 0 (e.g. 2.0)")
        if loss_fn not in LOSS_INPUTS:
            raise ValueError(f"loss_fn must be one of {', '.join(LOSS_INPUTS)}, got {loss_fn!r}")
        if adam is not None and learning_rate is not None:
            raise ValueError("pass learning_rate or adam, not both")
        self.engine = engine
        self.schedule = _schedule(schedule, shorthands)
        self.loss_fn, self.loss_fn_config = loss_fn, dict(loss_fn_config or {})
        if tis_cap is not None:
            self.loss_fn_config["tis_cap"] = float(tis_cap)
        self.max_staleness = max_staleness
        self.adam = adam or AdamParams(learning_rate=learning_rate if learning_rate is not None else 1e-4)
        self.sampling = {"temperature": temperature, "top_p": 1.0, "max_tokens": max_tokens}
        self.validation_sampling = {"temperature": val_temperature, "top_p": 1.0, "max_tokens": max_tokens}
        if estimator is not None and advantage != "grpo":
            raise ValueError("pass advantage= or estimator=, not both")
        if loss_fn == "cross_entropy":
            default: AdvantageEstimator = UniformWeight()
        else:
            default = advantage_estimator(advantage, GroupAdvantage(**COOKBOOK_ADVANTAGE))  # type: ignore[arg-type]
        self.estimator = estimator or default
        self.resume, self.keep_constant_groups, self.group_by_agent = resume, keep_constant_groups, group_by_agent
        self.policy_resource, self.model_name = policy_resource, model_name
        self.logger, self.project_name, self.experiment_name = list(logger), project_name, experiment_name
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.on_step = on_step
        self.gateway_host, self.gateway_port = gateway_host, gateway_port

    def run(
        self, run: TrainingRun, train_dataset: Sequence[Any] | None, val_dataset: Sequence[Any] | None
    ) -> TinkerResult:
        if not train_dataset:
            raise ValueError("Tinker needs a non-empty train dataset")
        if self.schedule.save_every and getattr(self.engine, "log_dir", "") is None:  # before any step
            raise ValueError("save_every needs an engine with a log_dir to save its state in")
        result = TinkerResult()
        on_step = self.on_step

        def step_done(step: int, metrics: dict[str, float]) -> None:
            result.steps.append(with_earlier_names(metrics))
            if on_step is not None:
                on_step(step, result.steps[-1])

        backend = TinkerBackend(
            self.engine, loss_fn=self.loss_fn, loss_fn_config=self.loss_fn_config, adam=self.adam,
            keep_constant_groups=self.keep_constant_groups, model_name=self.model_name, resume=self.resume,
        )  # fmt: skip
        trackers = MetricsLog(
            self.logger, project=self.project_name, experiment=self.experiment_name or run.run_id,
            log_dir=self.log_dir, config=self._config(),
        )  # fmt: skip
        loop = TrainingLoop(
            backend, schedule=self.schedule, estimator=self.estimator, sampling=self.sampling,
            validation_sampling=self.validation_sampling, group_by_agent=self.group_by_agent, trackers=trackers,
            on_step=step_done, policy_resource=self.policy_resource, gateway_host=self.gateway_host,
            gateway_port=self.gateway_port, max_staleness=self.max_staleness,
        )  # fmt: skip
        result.loop = loop_result = loop.run(run, list(train_dataset), list(val_dataset or []))
        result.validation = [(r.step, r.metrics.get("val/reward_mean", math.nan)) for r in loop_result.validations]
        result.checkpoints, result.train_seconds = loop_result.checkpoints, loop_result.train_seconds
        return result

    def _config(self) -> dict[str, Any]:
        return {
            "base_model": self.engine.base_model, "batch_size": self.schedule.batch_size,
            "group_size": self.schedule.group_size, "loss_fn": self.loss_fn, "learning_rate": self.adam.learning_rate,
            "max_staleness": self.max_staleness, **self.loss_fn_config, **self.sampling,
        }  # fmt: skip
