"""`lightning-otel train`: train an agent from the command line with any backend, keep what the run made in a run
folder, and say whether it learned (or `--dev`: a dry run, no training).

    lightning-otel train --agent my_agents:capitals --train train.jsonl --val val.jsonl --model smollm2
    lightning-otel train --agent my_agents:sql_rollout --train t.jsonl --model Qwen/Qwen2.5-0.5B-Instruct \\
        --algorithm verl --steps 40 actor_rollout_ref.rollout.n=8        # verl's own keys, applied last
    lightning-otel train --dev --model smollm2 --agent my_agents:capitals --train train.jsonl --n-tasks 2

The settings come from the flags, else the model's recipe (`lightning_otel.runs.recipes`), and are printed, with
where each came from, before anything starts. Exit status: 0 the policy improved beyond noise on the held-out tasks
(or there were none to judge it on), 3 it did not, 1 the run failed (nothing trained, every rollout failed), 2 bad
input (said in one line, before anything is loaded).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from lightning_otel.cli.collector_flags import CollectorUnreachable, check_collector_reachable, collector_options
from lightning_otel.cli.train_arguments import add_arguments
from lightning_otel.cli.train_run import Start

__all__ = ["add_arguments", "run_train"]

CI_FAST = {"steps": 2, "tasks_per_step": 2, "group_size": 2, "max_tokens": 16, "val_samples": 0}


class BadInput(ValueError):
    """A flag, file or setting that cannot run: one line, exit 2."""


def run_train(args: argparse.Namespace) -> int:
    sys.path.insert(0, os.getcwd())  # `--agent my_agents:agent` from the current directory, like python -m
    try:
        check_flags(args)
        tasks = load_tasks(args.train)  # the files first: cheaper than importing the agent
        val_tasks = load_tasks(args.val) if args.val else []
        agent = load_agent(args.agent)
    except (ImportError, AttributeError, OSError, ValueError, TypeError) as exc:
        return said(exc, code=2)
    try:
        check_collector_reachable(args.collector)
    except CollectorUnreachable as exc:
        return said(exc, code=1)
    if args.dev:
        from lightning_otel.cli.train_dev import run_dev

        return run_dev(args, agent, tasks, val_tasks)
    try:
        start = prepare(args, tasks, val_tasks)
    except (OSError, ValueError, TypeError) as exc:
        return said(exc, code=2)
    from lightning_otel.cli.train_run import train_planned

    return train_planned(start, agent, tasks, val_tasks)


def said(exc: BaseException, *, code: int, prefix: str = "") -> int:
    print(f"lightning-otel train: {prefix}{exc}", file=sys.stderr)
    return code


def load_tasks(path: str) -> list[Any]:
    from lightning_otel.runtime.task_files import load_tasks as load

    return load(path)


def load_agent(spec: str) -> Any:
    from lightning_otel.agent_api.agent_loading import load_agent as load

    return load(spec)


def check_flags(args: argparse.Namespace) -> None:
    """The flags' combinations, before any file or module is loaded."""
    collector_options(args)
    bad = [item for item in args.overrides if "=" not in item]
    if bad:
        raise BadInput(f"verl keys must be key=value, got {bad}")
    if args.tiny_model and args.model not in (None, "tiny"):
        raise BadInput(f"--tiny-model and --model {args.model}: keep one")
    if args.policies and args.agent_match:
        raise BadInput("--policy PATTERN=NAME and --agent-match: give the policies' patterns, or one regex")
    if args.warm_start and args.warm_start_teacher:
        raise BadInput("--warm-start FILE and --warm-start-teacher URL: give one")
    if args.save_every < 0:
        raise BadInput(f"--save-every must be >= 0, got {args.save_every}")


def model_name(args: argparse.Namespace) -> str:
    """`smollm2`, `tiny` or a folder (or the verl keys' model path); `--ci-fast` alone means the tiny model."""
    named = {flag: value for flag, value in (("--model", args.model), ("--tiny-model", "tiny" if args.tiny_model else
             None)) if value}  # fmt: skip
    if args.config or args.overrides:
        config_model = _config_model_path(args)
        if config_model:
            if named:
                raise BadInput(f"the policy is named twice ({next(iter(named))} and {MODEL_PATH_KEY} in the config): "
                               "keep one")  # fmt: skip
            named = {MODEL_PATH_KEY: config_model}
    named = list(named.values())
    if named:
        return named[0]
    if args.ci_fast:
        return "tiny"
    raise BadInput("give --model: smollm2, tiny, or a Hugging Face model folder")


MODEL_PATH_KEY = "actor_rollout_ref.model.path"


def _config_model_path(args: argparse.Namespace) -> str | None:
    named = [item.split("=", 1)[1] for item in args.overrides if item.split("=", 1)[0].lstrip("+") == MODEL_PATH_KEY]
    if named:
        return named[-1]
    if args.config:
        config = _verl_file(args.config)
        return ((config.get("actor_rollout_ref") or {}).get("model") or {}).get("path")
    return None


def _verl_file(path: str) -> dict[str, Any]:
    try:
        from omegaconf import OmegaConf
    except ImportError:
        raise BadInput("--config and verl keys need the [verl] extra (pip install 'lightning-otel[verl]')") from None
    return OmegaConf.to_container(OmegaConf.load(path))  # type: ignore[return-value]


def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def prepare(args: argparse.Namespace, tasks: list[Any], val_tasks: list[Any]) -> Start:
    """Every check that runs without loading a model or starting Ray: the plan, verl's config, the run folder."""
    from lightning_otel.runs.backends import LoopExtras
    from lightning_otel.runs.plan import Asked, resolve_plan
    from lightning_otel.runs.run_folder import RunFolder, new_run_id

    model = model_name(args)
    asked_values = {name: getattr(args, name) for name in
                    ("steps", "epochs", "tasks_per_step", "group_size", "learning_rate", "temperature", "max_tokens",
                     "lora_rank", "val_samples", "max_minutes")}  # fmt: skip
    if args.ci_fast:
        asked_values = {**{k: v for k, v in CI_FAST.items() if asked_values.get(k) is None}, **{
            k: v for k, v in asked_values.items() if v is not None}}  # fmt: skip
    algorithm = args.algorithm
    verl_keys = bool(args.config or args.overrides)
    if algorithm is None and verl_keys:
        algorithm = "verl"  # they mean nothing to another backend
    elif verl_keys and algorithm != "verl":
        raise BadInput(f"verl keys (--config, key=value) and --algorithm {algorithm}: they are verl's only")
    asked = Asked(algorithm=algorithm, **asked_values)
    folder_path = None if model in ("smollm2", "tiny") else Path(model)
    if folder_path is not None and not (folder_path / "config.json").is_file():
        raise BadInput(f"--model {model!r} is neither a model name (smollm2, tiny) nor a folder with a config.json")
    plan = resolve_plan(asked, model=model, folder=folder_path, train_tasks=len(tasks), val_tasks=len(val_tasks),
                        gpu=has_gpu() if algorithm is None else False)  # fmt: skip
    if verl_keys and args.algorithm is None:
        plan.sources["algorithm"] = "verl keys given"
    if plan.algorithm == "sft" and (args.advantage != "grpo" or args.max_staleness):
        raise BadInput("--algorithm sft keeps good rollouts' calls: --advantage and --max-staleness do not apply")
    if args.policies and plan.algorithm != "tinker":
        raise BadInput(f"--policy: a policy per agent trains with --algorithm tinker (LoRA adapters over one base), "
                       f"not {plan.algorithm}")  # fmt: skip
    if args.refill_tied_groups and args.max_staleness:
        raise BadInput("--refill-tied-groups runs with synchronous steps: leave out --max-staleness")
    if args.refill_tied_groups < 0:
        raise BadInput(f"--refill-tied-groups must be >= 0, got {args.refill_tied_groups}")
    distillation = distillation_of(args, plan.algorithm, tasks)
    if plan.algorithm == "dpo" and args.advantage != "grpo":
        raise BadInput("--algorithm dpo pairs rollouts by reward: --advantage does not apply")
    extras = LoopExtras(
        advantage=args.advantage, max_staleness=args.max_staleness, gateway_host=args.gateway_host,
        refill_tied_groups=args.refill_tied_groups, distillation=distillation,
        save_every=args.save_every, resume=args.resume, seed=args.seed, min_reward=args.min_reward,
        verl_config=_verl_file(args.config) if args.config else {}, verl_overrides=tuple(args.overrides),
    )  # fmt: skip
    if args.warm_start:
        from lightning_otel.runs.warm_start import read_warm_start

        extras = replace(extras, warm_start=tuple(read_warm_start(args.warm_start)))  # a bad row: said now
    if args.resume:
        return Start(args, plan, resumed_folder(args, plan), model, extras)
    run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / new_run_id(args.agent)
    folder = RunFolder(run_dir)
    if folder.store.exists():
        raise BadInput(f"{run_dir} already holds a run (its store.sqlite3): give another --run-dir, or --resume it")
    if plan.algorithm == "verl":
        check_verl(plan, folder, extras)
    return Start(args, plan, RunFolder.create(run_dir), model, extras)


def distillation_of(args: argparse.Namespace, algorithm: str, tasks: list[Any]) -> Any:
    """`--distill-context` / `--teacher` as the loop's `Distillation` (None: neither given); a context naming a field
    the tasks lack is said now, not at the first step."""
    if not (args.distill_context or args.teacher):
        if args.distill_alone or args.distill_weight != 1.0 or args.teacher_check:
            raise BadInput("--distill-weight, --distill-alone and --teacher-check need --distill-context or --teacher")
        return None
    if algorithm != "tinker":
        raise BadInput(f"on-policy distillation (--distill-context, --teacher) trains with --algorithm tinker: it "
                       f"scores the sampled token ids with the local engine, not {algorithm}")  # fmt: skip
    if args.teacher_check and not args.val:
        raise BadInput("--teacher-check answers the held-out tasks as the student and as the teacher: give --val")
    from lightning_otel.models.named import model_folder
    from lightning_otel.training.loop.distillation import Distillation

    try:
        teacher = model_folder(args.teacher) if args.teacher else None
        distillation = Distillation(weight=args.distill_weight, context=args.distill_context or "", teacher=teacher,
                                    alone=args.distill_alone, check=args.teacher_check)  # fmt: skip
        for task in tasks:
            distillation.context_for(task)
        return distillation
    except (ValueError, FileNotFoundError) as exc:
        raise BadInput(f"--teacher / --distill-*: {exc}") from exc


def resumed_folder(args: argparse.Namespace, plan: Any) -> Any:
    """`--resume`: the run folder --run-dir names, as an earlier `train` left it (its settings.json)."""
    from lightning_otel.runs.run_folder import RunFolder

    if not args.run_dir:
        raise BadInput("--resume continues the run in --run-dir: give --run-dir")
    if plan.algorithm != "tinker":
        raise BadInput(f"--resume continues tinker runs; --algorithm {plan.algorithm} starts over (verl resumes with "
                       "its own key trainer.resume_mode=auto)")  # fmt: skip
    folder = RunFolder(Path(args.run_dir))
    if not folder.settings.is_file():
        raise BadInput(f"--resume: {args.run_dir} holds no run (no {folder.settings.name})")
    return folder


def check_verl(plan: Any, folder: Any, extras: Any) -> None:
    """verl's config composed and validated now (seconds), not in a Ray worker a minute in."""
    try:
        from lightning_otel.training.verl import verl_internals
        from lightning_otel.training.verl.config import compose_verl_config
        from lightning_otel.training.verl.config_checks import check_batch_sizes
    except ImportError:
        raise BadInput("--algorithm verl needs the [verl] extra (pip install 'lightning-otel[verl]')") from None
    from lightning_otel.runs.backends import verl_config

    config = verl_config(plan, folder, Path("model-not-loaded-yet"), extras)
    with _quiet_logs():
        composed = compose_verl_config(config, overrides=list(extras.verl_overrides), cpu=not has_gpu())
        check_batch_sizes(composed)
        verl_internals.validate(composed)


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """The real run says its warnings (and verl its own lines, in the log); a check says only what refuses."""
    import io
    import logging
    import warnings

    logger = logging.getLogger("lightning_otel.verl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
