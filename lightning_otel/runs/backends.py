"""The algorithm a planned run trains with, built from its settings (`plan.Plan`) and writing into its folder.

    algorithm = build_algorithm(plan, folder, model_path, extra)   # VERL, Tinker, DPO or SFT

Every backend gets the same schedule (the plan's steps, tasks per step and group size; the train tasks reshuffled
each epoch; validation before the first step and after the last, greedy and sampled; a checkpoint after the last
step, and every `save_every` steps), the same sampling (the plan's temperature and reply budget while training,
greedy in validation) and the same trackers (a console line a step, every metric in the folder's metrics.jsonl).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_otel.runs.plan import Plan
from lightning_otel.runs.run_folder import RunFolder
from lightning_otel.training.loop.distillation import Distillation
from lightning_otel.training.loop.options import Sampling, Trackers, TrainingOptions
from lightning_otel.training.loop.schedule import Schedule

# DPO's LoRA: the projections, not the output layer (SmolLM2 ties it to the embeddings, and DPO serves its policy
# merged, which would move both)
DPO_LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
EPOCHS_UNBOUNDED = 1_000_000  # the plan's steps bound the run; the tasks go round as often as that takes
CHECKPOINTED = ("tinker", "verl")  # backends whose run's model is exported from their last checkpoint


@dataclass(frozen=True, slots=True)
class LoopExtras:
    """The loop settings a run takes from flags the plan does not hold."""

    advantage: str = "grpo"
    max_staleness: int = 0
    refill_tied_groups: float = 0.0  # 0: groups whose rewards tie are not replaced
    distillation: Distillation | None = None  # on-policy distillation (tinker)
    gateway_host: str = "127.0.0.1"
    save_every: int = 0  # 0: only after the last step
    resume: bool = False  # start after the run folder's latest checkpoint (`--resume`)
    seed: int = 0
    min_reward: float = 1.0  # SFT: the reward a rollout needs to be kept
    verl_config: dict[str, Any] = field(default_factory=dict)  # --config's
    verl_overrides: Sequence[str] = ()  # key=value, applied last
    warm_start: tuple[dict[str, Any], ...] = ()  # --warm-start's examples, read (and checked) before the run
    on_step: Callable[[int, dict[str, float]], None] | None = None


def schedule_of(plan: Plan, extras: LoopExtras, *, validate: bool) -> Schedule:
    return Schedule(
        batch_size=plan.tasks_per_step,
        group_size=plan.group_size,
        epochs=EPOCHS_UNBOUNDED,
        max_steps=plan.steps,
        shuffle=True,
        seed=extras.seed,
        val_every=plan.steps if validate else 0,
        val_sampled=plan.val_samples,
        max_seconds=plan.max_minutes * 60 if plan.max_minutes else None,
        resume=extras.resume,
        # the model is exported from the last checkpoint (Tinker, verl); DPO and SFT write their model themselves
        save_every=extras.save_every or (plan.steps if plan.algorithm in CHECKPOINTED else 0),
    )


def options_of(plan: Plan, folder: RunFolder, extras: LoopExtras, *, validate: bool = True) -> TrainingOptions:
    return TrainingOptions(
        schedule=schedule_of(plan, extras, validate=validate),
        sampling=Sampling(plan.temperature, plan.top_p, plan.max_tokens),
        validation_sampling=Sampling(0.0, 1.0, plan.max_tokens),
        advantage=extras.advantage,
        max_staleness=extras.max_staleness,
        refill_tied_groups=extras.refill_tied_groups,
        distillation=extras.distillation,
        gateway_host=extras.gateway_host,
        trackers=trackers_of(folder),
        on_step=extras.on_step,
    )


def trackers_of(folder: RunFolder) -> Trackers:
    """A console line a step; every metric in the folder's metrics.jsonl, under the run's id."""
    return Trackers(("console", "jsonl"), project="lightning-otel", experiment=folder.run_id, log_dir=folder.path)


def build_algorithm(plan: Plan, folder: RunFolder, model: Path, extras: LoopExtras) -> Any:
    """The plan's backend over `model` (the folder training starts from), writing into `folder`."""
    if plan.algorithm == "tinker":
        from lightning_otel.training.tinker.algorithm import Tinker
        from lightning_otel.training.tinker.local_engine import LocalEngine

        engine = LocalEngine(model, rank=plan.lora_rank or 32, seed=extras.seed, log_dir=folder.path)
        return Tinker(engine, options_of(plan, folder, extras), learning_rate=plan.learning_rate)
    if plan.algorithm == "dpo":
        from lightning_otel.export.shapes import PairRule
        from lightning_otel.training.dpo.algorithm import DPO

        rank = plan.lora_rank or 32
        lora = {"r": rank, "lora_alpha": rank, "target_modules": list(DPO_LORA_MODULES)}
        options = options_of(plan, folder, extras)
        return DPO(model, folder.model, options, learning_rate=plan.learning_rate, lora=lora,
                   pair_rule=PairRule("best-worst"))  # fmt: skip
    if plan.algorithm == "sft":
        from lightning_otel.training.sft import SFT

        return SFT(model, folder.model, options_of(plan, folder, extras, validate=False), min_reward=extras.min_reward,
                   learning_rate=plan.learning_rate, seed=extras.seed)  # fmt: skip
    if plan.algorithm == "verl":
        from lightning_otel.training.verl.algorithm import VERL

        options = TrainingOptions(advantage=extras.advantage, max_staleness=extras.max_staleness,
                                  refill_tied_groups=extras.refill_tied_groups,
                                  gateway_host=extras.gateway_host, on_step=extras.on_step,
                                  trackers=trackers_of(folder))  # fmt: skip
        return VERL(verl_config(plan, folder, model, extras), options, overrides=list(extras.verl_overrides),
                    val_sampled=plan.val_samples,
                    max_seconds=plan.max_minutes * 60 if plan.max_minutes else None)  # fmt: skip
    raise ValueError(f"unknown algorithm {plan.algorithm!r}")


def verl_config(plan: Plan, folder: RunFolder, model: Path, extras: LoopExtras) -> dict[str, Any]:
    """verl's names for the plan (the user's --config merged over them, its key=value overrides applied last)."""
    from omegaconf import OmegaConf

    mini_batch = plan.tasks_per_step
    planned = {
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": plan.tasks_per_step, "max_prompt_length": 8192,  # a cap: batches are as wide
                 "max_response_length": plan.max_tokens, "seed": extras.seed, "shuffle": True},  # as their longest
        "actor_rollout_ref": {
            "model": {"path": str(model)},
            "rollout": {"n": plan.group_size, "temperature": plan.temperature, "top_p": plan.top_p,
                        "response_length": plan.max_tokens,
                        "val_kwargs": {"temperature": 0.0, "top_p": 1.0, "do_sample": False, "n": 1}},
            "actor": {"ppo_mini_batch_size": mini_batch, "use_kl_loss": False, "optim": {"lr": plan.learning_rate},
                      "checkpoint": {"save_contents": ["model", "optimizer", "extra", "hf_model"]}},
        },
        "trainer": {
            "total_epochs": EPOCHS_UNBOUNDED,
            "total_training_steps": plan.steps,
            "project_name": "lightning-otel",
            "experiment_name": folder.run_id,
            "val_before_train": bool(plan.val_tasks),
            "test_freq": plan.steps if plan.val_tasks else -1,
            "save_freq": extras.save_every or plan.steps,
            "default_local_dir": str(folder.checkpoints.resolve()),
        },
    }  # fmt: skip
    return OmegaConf.to_container(OmegaConf.merge(planned, extras.verl_config))  # type: ignore[return-value]


__all__ = ["LoopExtras", "build_algorithm", "options_of", "verl_config"]
