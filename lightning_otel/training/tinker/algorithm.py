"""`Tinker`: RL on the user's agents with a Tinker-shaped training engine (local LoRA, or the hosted Tinker service).

    engine = lightning_otel.LocalEngine("path/to/model", rank=32)         # or RemoteEngine("Qwen/Qwen3-4B-...")
    options = lightning_otel.TrainingOptions(schedule=lightning_otel.Schedule(batch_size=8, group_size=4))
    trainer = lightning_otel.Trainer(
        n_runners=2,
        algorithm=lightning_otel.Tinker(engine, options, learning_rate=1e-4),
        adapter={"agent_match": "player"},
    )
    result = trainer.fit(agent, train_tasks, val_tasks)                 # -> TrainingResult

It runs the training loop (`lightning_otel.training.loop`) with the engine as its backend: each step, the batch's tasks
are queued `group_size` times (one group per task); the runners' agents call the policy gateway, which serves the
engine's current sampler in vLLM's format (token ids, logprobs, and the policy version on every LLM span); the
rollouts' spans are read in one call, `agent_match` selects the calls that become samples, each gets its rollout's
group-relative advantage (reward - the group's mean), becomes a datum from its captured token ids (never
re-tokenized text; observation tokens weigh 0), and the engine runs forward_backward + optim_step and hands back a
sampler of the new weights, which the gateway serves from the next step on.

A policy per agent: with `agent_match` a mapping (`{"plan": "planner", "call": "caller"}`), each policy is a LoRA
adapter over the engine's base (`engine.policy_engine`), or the engine a mapping `{"planner": engine_a, ...}` gives
it; the gateway serves each call with its agent's policy and each policy learns from its own agents' calls only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from lightning_otel.runtime.algorithm import Algorithm
from lightning_otel.runtime.training_run import TrainingRun
from lightning_otel.training.loop.loop import TrainingLoop
from lightning_otel.training.loop.options import Sampling, TrainingOptions, with_moved_arguments
from lightning_otel.training.loop.result import TrainingResult
from lightning_otel.training.loop.schedule import Schedule
from lightning_otel.training.tinker.backend import TinkerBackend
from lightning_otel.training.tinker.engine import TrainingEngine
from lightning_otel.training.tinker.types import LOSS_INPUTS, AdamParams

# What `TrainingOptions` fields left unset mean for Tinker: 8 tasks a step, each run 4 times, validated every 5
# steps (the sampling: `TrainingOptions.with_sampling_defaults`).
DEFAULT_SCHEDULE = Schedule(batch_size=8, group_size=4, val_every=5)


class Tinker(Algorithm):
    """See the module docstring.

    `options`: the loop's settings (`TrainingOptions`: schedule, sampling, advantage, max_staleness, trackers,
    on_step, ...; `schedule.save_every` saves the engine's state under its log_dir, `schedule.resume` starts after
    the latest of them). The engine's own: `loss_fn` "importance_sampling" (default), "ppo" (with `loss_fn_config`
    clip thresholds) or "cross_entropy" (supervised: every sample weighs 1); `adam` (or just `learning_rate`);
    `keep_constant_groups`: train on groups whose rewards are all equal (they carry no advantage; dropped by
    default); `model_name`: the name the policy is served under; `tis_cap`: truncated importance sampling per token
    at this cap (importance_sampling only; off by default). Sampling at a temperature other than 1 takes the
    learner's log-probs at that temperature too (the LocalEngine's `loss_fn_config["temperature"]`; an engine that
    cannot is refused).
    """

    shows_progress: ClassVar[bool] = True  # the loop's step bar (trackers' console)
    policy_per_agent = True

    def __init__(
        self,
        engine: TrainingEngine | Mapping[str, TrainingEngine],
        options: TrainingOptions | None = None,
        *,
        loss_fn: str = "importance_sampling",
        loss_fn_config: Mapping[str, float] | None = None,
        learning_rate: float | None = None,
        adam: AdamParams | None = None,
        keep_constant_groups: bool = False,
        model_name: str = "agl-policy",
        tis_cap: float | None = None,
        **moved: Any,
    ) -> None:
        if tis_cap is not None and (loss_fn != "importance_sampling" or tis_cap <= 0):
            raise ValueError(f"tis_cap={tis_cap} needs loss_fn='importance_sampling' and a cap > 0 (e.g. 2.0)")
        if loss_fn not in LOSS_INPUTS:
            raise ValueError(f"loss_fn must be one of {', '.join(LOSS_INPUTS)}, got {loss_fn!r}")
        if adam is not None and learning_rate is not None:
            raise ValueError("pass learning_rate or adam, not both")
        options = with_moved_arguments("Tinker", options, moved)
        self.options = options.with_defaults(schedule=DEFAULT_SCHEDULE).with_sampling_defaults()
        engines = dict(engine) if isinstance(engine, Mapping) else {}  # a model per policy
        if isinstance(engine, Mapping) and not engines:
            raise ValueError("Tinker got an empty mapping of engines: give one engine, or one per policy")
        self.engine = next(iter(engines.values())) if engines else engine
        self.loss_fn, self.loss_fn_config = loss_fn, dict(loss_fn_config or {})
        if tis_cap is not None:
            self.loss_fn_config["tis_cap"] = float(tis_cap)
        self.adam = adam or AdamParams(learning_rate=learning_rate if learning_rate is not None else 1e-4)
        self._temper(engines or {"": self.engine})
        self.keep_constant_groups, self.model_name = keep_constant_groups, model_name
        self.backend = TinkerBackend(
            self.engine, loss_fn=self.loss_fn, loss_fn_config=self.loss_fn_config, adam=self.adam,
            keep_constant_groups=keep_constant_groups, model_name=model_name,
            resume=bool(self.options.schedule and self.options.schedule.resume), engines=engines,
        )  # fmt: skip
        self.backend.estimator(self.options.advantage)  # an advantage the loss cannot use: said now

    def _temper(self, engines: Mapping[str, TrainingEngine]) -> None:
        """Sampling below (or above) temperature 1: the learner's log-probs are taken at that temperature too, so the
        ratio to the sampler's is 1 on-policy (an engine that cannot is refused, before anything starts)."""
        sampling = self.options.sampling or Sampling()
        if self.loss_fn == "cross_entropy" or sampling.temperature in (0.0, 1.0):
            return
        unable = [type(engine).__name__ for engine in engines.values() if not getattr(engine, "tempered_logprobs", 0)]
        if unable:
            raise ValueError(f"sampling at temperature {sampling.temperature:g}: {unable[0]} computes log-probs at "
                             "temperature 1 only, so the importance ratio would be off; train at temperature 1 (as "
                             "the Tinker cookbook does) or with the LocalEngine")  # fmt: skip
        self.loss_fn_config["temperature"] = float(sampling.temperature)

    def run(
        self, run: TrainingRun, train_dataset: Sequence[Any] | None, val_dataset: Sequence[Any] | None
    ) -> TrainingResult:
        if not train_dataset:
            raise ValueError("Tinker needs a non-empty train dataset")
        schedule = self.options.schedule or DEFAULT_SCHEDULE
        if schedule.save_every and getattr(self.engine, "log_dir", "") is None:  # before any step
            raise ValueError("save_every needs an engine with a log_dir to save its state in")
        loop = TrainingLoop(self.backend, self.options, run_config=self._config())
        return loop.run(run, list(train_dataset), list(val_dataset or []))

    def _config(self) -> dict[str, Any]:
        schedule, sampling = self.options.schedule or DEFAULT_SCHEDULE, self.options.sampling or Sampling()
        return {
            "base_model": self.engine.base_model, "batch_size": schedule.batch_size,
            "group_size": schedule.group_size, "loss_fn": self.loss_fn, "learning_rate": self.adam.learning_rate,
            "max_staleness": self.options.max_staleness, **self.loss_fn_config, **sampling.params(),
        }  # fmt: skip
