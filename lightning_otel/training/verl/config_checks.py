"""Checks and fills a composed verl config before Ray or any worker starts, so a mistake costs seconds, not a Ray
worker's traceback a minute later.

- The rollout engine: on a machine without a GPU the policy is served by our `hf` CPU replica (a config asking for
  vLLM or SGLang gets it, with a warning); on a GPU machine an engine that is not installed is an error.
- Batch sizes verl would refuse in a worker (a step's tasks fewer than its mini-batch), said with their full keys
  (`check_batch_sizes`: before a run starts Ray, not when a config is composed).
- Micro-batch sizes left unset (Agent Lightning's configs leave them out) are derived from the mini-batch.
- Checkpoints: each run writes to a folder of its own and resumes only when `trainer.resume_mode` is set: `auto`
  resumes the latest run of the same project/experiment, `resume_path` the given checkpoint.
- The model: `actor_rollout_ref.model.path` must load (a local directory, or a hub name that can be fetched).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
import uuid
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("lightning_otel.verl")

GPU_ENGINES = ("vllm", "sglang")
CHECKPOINT_MARKER = "latest_checkpointed_iteration.txt"  # verl writes it beside its global_step_N folders


class ConfigError(ValueError):
    """A verl config that cannot train as given; the message says what to change."""


def user_set(user: DictConfig, key: str) -> bool:
    return OmegaConf.select(user, key, default=None) is not None


def engine_installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def check_rollout_engine(config: DictConfig, *, cpu: bool) -> None:
    rollout = config.actor_rollout_ref.rollout
    name = rollout.name
    if cpu:
        if name != "hf":
            log.warning(
                "actor_rollout_ref.rollout.name=%s needs a GPU; this machine has none, so the policy is served by "
                "lightning-otel's hf CPU replica (rollout.name=hf)",
                name,
            )
            rollout.name = "hf"
        return
    if name in GPU_ENGINES and not engine_installed(name):
        raise ConfigError(
            f"actor_rollout_ref.rollout.name={name} but {name} is not installed: `pip install {name}` on this GPU "
            "machine, or train on CPU with VERL(..., device='cpu')"
        )
    if name == "hf":
        raise ConfigError("actor_rollout_ref.rollout.name=hf is the CPU replica: on a GPU use vllm (or device='cpu')")


def _largest_divisor_at_most(value: int, limit: int) -> int:
    return max(d for d in range(1, min(value, limit) + 1) if value % d == 0)


def derive_micro_batches(config: DictConfig, *, limit: int = 8) -> None:
    """Unset micro-batch sizes := the largest divisor (<= `limit`) of the per-GPU mini-batch verl will use."""
    ref = config.actor_rollout_ref
    if ref.actor.get("use_dynamic_bsz", False):
        return
    n_gpus = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
    per_gpu_mini = max(1, int(ref.actor.ppo_mini_batch_size) * int(ref.rollout.n) // max(n_gpus, 1))
    micro = _largest_divisor_at_most(per_gpu_mini, limit)
    sections = [
        (ref.actor, "ppo_micro_batch_size", "actor_rollout_ref.actor"),
        (ref.rollout, "log_prob_micro_batch_size", "actor_rollout_ref.rollout"),
        (ref.ref, "log_prob_micro_batch_size", "actor_rollout_ref.ref"),
    ]
    if "critic" in config and config.critic.get("enable") is not False:
        sections.append((config.critic, "ppo_micro_batch_size", "critic"))
    for section, key, where in sections:
        if section.get(key) is None and section.get(f"{key}_per_gpu") is None:
            section[f"{key}_per_gpu"] = micro
            log.info("%s.%s_per_gpu was unset: derived %d from the mini-batch", where, key, micro)


def _latest_step(directory: Path) -> int | None:
    marker = directory / CHECKPOINT_MARKER
    try:
        return int(marker.read_text().strip())
    except (OSError, ValueError):
        return None


def _latest_run(experiment: Path) -> Path | None:
    """The experiment's most recently written run folder that holds a checkpoint."""
    runs = [path for path in experiment.glob("run-*") if _latest_step(path) is not None]
    return max(runs, key=lambda path: path.stat().st_mtime, default=None)


def place_checkpoints(config: DictConfig, user: DictConfig) -> None:
    """A folder per run; resume only when asked, from where the user expects, and say so."""
    trainer = config.trainer
    if not user_set(user, "trainer.resume_mode"):
        trainer.resume_mode = "disable"
    experiment = Path("checkpoints") / str(trainer.project_name) / str(trainer.experiment_name)
    if not user_set(user, "trainer.default_local_dir"):
        earlier = _latest_run(experiment) if trainer.resume_mode == "auto" else None
        if earlier is not None:
            trainer.default_local_dir = str(earlier)
        else:
            stamp = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]
            trainer.default_local_dir = str(experiment / f"run-{stamp}")
            if trainer.resume_mode == "auto":
                log.warning(
                    "trainer.resume_mode=auto: no earlier checkpoint under %s, starting from step 0", experiment
                )
    directory = Path(str(trainer.default_local_dir))
    step = _latest_step(directory)
    if trainer.resume_mode == "disable" and step is not None:
        log.warning(
            "%s already holds a checkpoint (step %d) of an earlier run; this run starts from step 0 and writes its "
            "own checkpoints there. Set trainer.resume_mode=auto to continue that run instead",
            directory,
            step,
        )
    elif trainer.resume_mode == "auto" and step is not None:
        total = trainer.get("total_training_steps")
        log.warning(
            "resuming from step %d in %s (trainer.resume_mode=auto)%s",
            step,
            directory,
            f": total_training_steps={total} counts from step 0, so {max(0, total - step)} steps remain"
            if total
            else "",
        )
    log.info("checkpoints: %s (trainer.save_freq=%s)", directory, trainer.save_freq)


def check_model_path(config: DictConfig) -> None:
    """The policy loads: a local model directory, or a hub name `transformers` can fetch (seconds, before Ray)."""
    path = str(config.actor_rollout_ref.model.path)
    if os.path.isdir(os.path.expanduser(path)):
        return
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(path)
    except Exception as exc:
        raise ConfigError(
            f"actor_rollout_ref.model.path={path!r} cannot be loaded ({type(exc).__name__}: {str(exc)[:200]}): "
            "give a local model directory (or `lightning-otel train --tiny-model` for a tiny offline model)"
        ) from None


def check_batch_sizes(config: DictConfig) -> None:
    """verl's own batch checks, said with the full keys before Ray starts (verl says them in a worker, shortened)."""
    data, ref = config.data, config.actor_rollout_ref
    if ref.actor.get("use_dynamic_bsz", False):
        return
    tasks, mini = int(data.train_batch_size), int(ref.actor.ppo_mini_batch_size)
    if tasks < mini:
        raise ConfigError(f"data.train_batch_size ({tasks}) must be >= actor_rollout_ref.actor.ppo_mini_batch_size "
                          f"({mini}): verl updates on mini-batches of a step's tasks (`lightning-otel train "
                          "--tasks-per-step N` sets both)")  # fmt: skip
    for key in ("actor.ppo_micro_batch_size_per_gpu", "rollout.log_prob_micro_batch_size_per_gpu",
                "ref.log_prob_micro_batch_size_per_gpu"):  # fmt: skip
        value = OmegaConf.select(ref, key, default=None)
        if value is not None and int(value) < 1:
            raise ConfigError(f"actor_rollout_ref.{key} must be >= 1, got {value}")


def check_config(config: DictConfig, user: DictConfig, *, cpu: bool) -> DictConfig:
    """All of the above, in place; returns `config`."""
    check_rollout_engine(config, cpu=cpu)
    derive_micro_batches(config)
    place_checkpoints(config, user)
    return config
