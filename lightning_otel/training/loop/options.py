"""The training loop's settings as one value: `TrainingOptions`, taken whole by `TrainingLoop` and by every
backend's facade (`VERL`, `Tinker`, `DPO`, `SFT`), which keep only their engine's own arguments.

    options = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=8, group_size=4, max_steps=20, val_every=5),
        sampling=agl.Sampling(temperature=1.0, max_tokens=128),
        advantage="anchor",
        max_staleness=1,
    )
    agl.Tinker(agl.LocalEngine("path/to/model"), options, learning_rate=1e-4)

A field left None takes the facade's default: Tinker runs 8 tasks x 4 a step and samples at temperature 1 while
training, 0 in validation; DPO 4 x 4 for 20 steps; VERL reads its own config (`data.train_batch_size`,
`rollout.n`, `trainer.total_epochs`, the rollout's temperatures, `trainer.logger`) and refuses the fields that
config owns. Every field is checked when the options are made, once, not when a run reaches it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from lightning_otel.training.loop.advantages import AdvantageEstimator
from lightning_otel.training.loop.distillation import Distillation
from lightning_otel.training.loop.schedule import Schedule

ADVANTAGES = ("grpo", "anchor")


@dataclass(frozen=True, slots=True)
class Sampling:
    """What the policy gateway enforces on every policy call, whatever the agent asked for; `max_tokens` is a cap
    (an agent asking for fewer reply tokens gets its fewer)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 64

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0: greedy), got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens!r}")

    def params(self) -> dict[str, Any]:
        """The request fields the gateway sets."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}


@dataclass(frozen=True, slots=True)
class Trackers:
    """Where each step's metrics go: "console" (one line a step), "jsonl" (`log_dir`/metrics.jsonl) and verl's
    trackers by name (wandb, tensorboard, mlflow, swanlab, file, ...). `experiment` None: the run's id."""

    logger: tuple[str, ...] = ("console",)
    project: str = "lightning-otel"
    experiment: str | None = None
    log_dir: Path | None = None

    def __post_init__(self) -> None:
        if isinstance(self.logger, str):  # ("console") is a string, not a tuple: said, not split into letters
            raise TypeError(f"logger must be a sequence of names, got the string {self.logger!r}")
        object.__setattr__(self, "logger", tuple(self.logger))
        if self.log_dir is not None:
            object.__setattr__(self, "log_dir", Path(self.log_dir))
        if "jsonl" in self.logger and self.log_dir is None:
            raise ValueError("logger 'jsonl' needs a log_dir")


@dataclass(frozen=True, slots=True)
class TrainingOptions:
    """See the module docstring.

    `schedule`: tasks per step, group size, steps, validation and checkpoint intervals, resume (`Schedule`);
    `sampling` / `validation_sampling`: what the gateway enforces while training / validating (None for validation:
    the training sampling, or the facade's); `advantage`: "grpo" (the backend's GRPO), "anchor" (per-call credit,
    `AnchorAdvantage` with the backend's GRPO settings) or an `AdvantageEstimator` of your own; `group_by_agent`:
    advantages per task and agent; `max_staleness`: 0 (synchronous steps) or k >= 1 (asynchronous: no trained
    sample more than k policy versions old); `collect_timeout_s`: a step's rollouts (asynchronous: a group's) still
    running this long after they were queued are cancelled (None: wait for them); `policy_resource`: the resource
    the agents read the policy from; `gateway_host` / `gateway_port`: where the policy gateway listens ("0.0.0.0"
    for runners on other machines); `trackers`: where the metrics go; `on_step(step, metrics)`: called after each
    step; `refill_tied_groups`: a group whose rewards all tie is replaced by groups of further tasks until the step
    holds as many differing groups as tasks, drawing at most this many times the step's tasks more (0: no refill;
    `training.loop.refill`); `distillation`: on-policy distillation, a teacher's per-token signal on the sampled
    tokens (`Distillation`, `training.loop.distillation`; the tinker backend)."""

    schedule: Schedule | None = None
    sampling: Sampling | None = None
    validation_sampling: Sampling | None = None
    advantage: str | AdvantageEstimator = "grpo"
    group_by_agent: bool = False
    max_staleness: int = 0
    collect_timeout_s: float | None = None
    policy_resource: str = "main_llm"
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 0
    trackers: Trackers | None = None
    on_step: Callable[[int, dict[str, float]], None] | None = None
    refill_tied_groups: float = 0.0
    distillation: Distillation | None = None

    def __post_init__(self) -> None:
        if not self.refill_tied_groups >= 0:
            raise ValueError(f"refill_tied_groups must be >= 0 (0: tied groups are not replaced), got "
                             f"{self.refill_tied_groups!r}")  # fmt: skip
        if self.refill_tied_groups and self.max_staleness:
            raise ValueError("refill_tied_groups runs with synchronous steps (max_staleness=0): an asynchronous "
                             "step takes the groups already queued")  # fmt: skip
        if isinstance(self.max_staleness, bool) or not isinstance(self.max_staleness, int) or self.max_staleness < 0:
            raise ValueError(f"max_staleness must be an int >= 0 (0: synchronous steps), got {self.max_staleness!r}")
        if not isinstance(self.advantage, AdvantageEstimator) and self.advantage not in ADVANTAGES:
            raise ValueError(f"advantage must be 'grpo', 'anchor' or an AdvantageEstimator, got {self.advantage!r}")
        if self.collect_timeout_s is not None and not self.collect_timeout_s > 0:
            raise ValueError(f"collect_timeout_s must be > 0 seconds (or None), got {self.collect_timeout_s!r}")
        if not 0 <= self.gateway_port <= 65535:
            raise ValueError(f"gateway_port must be a TCP port (0: a free one), got {self.gateway_port!r}")
        for name, kind in (("schedule", Schedule), ("sampling", Sampling), ("validation_sampling", Sampling),
                           ("trackers", Trackers), ("distillation", Distillation)):  # fmt: skip
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise TypeError(f"{name} takes a {kind.__name__}(...), got {value!r}")

    def with_defaults(self, **defaults: Any) -> TrainingOptions:
        """These options with the fields left None set to a facade's `defaults` (fields already set win)."""
        unknown = set(defaults) - {field.name for field in fields(self)}
        if unknown:
            raise TypeError(f"not TrainingOptions fields: {sorted(unknown)}")
        return replace(self, **{name: value for name, value in defaults.items() if getattr(self, name) is None})

    def with_sampling_defaults(self) -> TrainingOptions:
        """Training sampling as set (temperature 1 and 64 new tokens otherwise); validation as set, else greedy with
        the training's token budget: the defaults of the backends that serve their own replicas (Tinker, DPO)."""
        sampling = self.sampling or Sampling()
        return self.with_defaults(sampling=sampling, validation_sampling=Sampling(0.0, 1.0, sampling.max_tokens))

    def refuse(self, owner: str, **why: str) -> None:
        """A facade whose engine owns some fields (VERL's config): each one set here is an error that says where it
        is set instead."""
        for name, instead in why.items():
            if getattr(self, name) is not None:
                raise ValueError(f"{owner} takes {name} from {instead}: leave TrainingOptions.{name} unset")

    def rollout_settings(self, estimator: AdvantageEstimator) -> dict[str, Any]:
        """What every rollout of the run records of these options (the rollout view recomputes each call's
        advantage from it and says whether the run was asynchronous)."""
        described = estimator.describe()
        return {
            "max_staleness": self.max_staleness,
            "group_by_agent": self.group_by_agent,
            **({"estimator": {**described, "group_by_agent": self.group_by_agent}} if described is not None else {}),
        }


# A facade's keyword from before `TrainingOptions` (0.1) that is not one of its fields -> its spelling now.
MOVED_ELSEWHERE = {
    "rollout_timeout_s": "Trainer(settings=RunSettings(rollout_timeout_s=...))",
    "estimator": "TrainingOptions(advantage=<the estimator>)",
    "max_tokens": "TrainingOptions(sampling=Sampling(max_tokens=...))",
    "temperature": "TrainingOptions(sampling=Sampling(temperature=...))",
    "val_temperature": "TrainingOptions(validation_sampling=Sampling(temperature=...))",
    "resume": "TrainingOptions(schedule=Schedule(resume=True))",
    "logger": "TrainingOptions(trackers=Trackers(logger=...))",
    "project_name": "TrainingOptions(trackers=Trackers(project=...))",
    "experiment_name": "TrainingOptions(trackers=Trackers(experiment=...))",
    "log_dir": "TrainingOptions(trackers=Trackers(log_dir=...))",
}


def with_moved_arguments(owner: str, options: TrainingOptions | None, moved: Mapping[str, Any]) -> TrainingOptions:
    """A facade's options with the keywords it took before `TrainingOptions` held them (`VERL(cfg, on_step=f)`):
    a field of the options still works, with a DeprecationWarning naming its new spelling (for the 0.2 releases);
    one that moved elsewhere is a TypeError that names where; any other name is the TypeError Python would raise."""
    options = options or TrainingOptions()
    names = {field.name for field in fields(TrainingOptions)}
    for name in moved:
        if name in MOVED_ELSEWHERE:
            raise TypeError(f"{owner}({name}=...) moved: pass {MOVED_ELSEWHERE[name]}")
        if name not in names:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")
        if getattr(options, name) != getattr(TrainingOptions(), name):
            raise TypeError(f"{owner}({name}=...) and options.{name} both set: keep options.{name}")
        warnings.warn(f"{owner}({name}=...) moved to the options: pass {owner}(..., TrainingOptions({name}=...)); "
                      "the old spelling goes in 0.3", DeprecationWarning, stacklevel=3)  # fmt: skip
    return replace(options, **moved) if moved else options


__all__ = ["Sampling", "Trackers", "TrainingOptions"]
