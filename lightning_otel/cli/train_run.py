"""A planned `lightning-otel train` run, start to end: the settings said and kept, the model built, the warm start,
the training, the model exported, the verdict (`lightning_otel.cli.train` plans it)."""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning_otel
from lightning_otel.cli.collector_flags import collector_options, run_settings, runner_options
from lightning_otel.cli.program_name import invoked_as
from lightning_otel.runtime.restart_budget import RunnersKeepDying

if TYPE_CHECKING:
    import argparse

    from lightning_otel.runs.backends import LoopExtras
    from lightning_otel.runs.plan import Plan
    from lightning_otel.runs.run_folder import RunFolder

NOT_IMPROVED_EXIT = 3  # the run trained, and its held-out reward did not rise beyond noise


class Start:
    """A run ready to start (`lightning_otel.cli.train.prepare`): the flags, its plan and folder, the model as
    named, and the loop's other settings."""

    def __init__(self, args: argparse.Namespace, plan: Plan, folder: RunFolder, model: str, extras: LoopExtras) -> None:
        self.args, self.plan, self.folder, self.model, self.extras = args, plan, folder, model, extras


def train_planned(start: Start, agent: Any, tasks: list[Any], val_tasks: list[Any]) -> int:
    from lightning_otel.runs.backends import build_algorithm
    from lightning_otel.runs.verdict import Verdict

    args, plan, folder = start.args, start.plan, start.folder
    log_file = Path(args.log_file) if args.log_file else folder.log
    earlier = resumed_settings(start)
    keep_settings(start, earlier)
    print(f"lightning-otel train: run {folder.run_id} in {folder.path}/  (settings.json keeps what follows)")
    if earlier is not None:
        print(
            f"  resumed        after the latest checkpoint in {folder.checkpoints}/ (started "
            f"{earlier.get('started', '?')}; {len(earlier.get('resumed', [])) + 1} resume(s))  [--resume]"
        )
    for line in plan.lines():
        print(line)
    if args.policies:
        named = ", ".join(f"{name} <- agents matching {pattern!r}" for pattern, name in args.policies)
        print(f"  policies       {named} (LoRA adapters over one base, each served to its agents)  [--policy]")
    if not args.capture_content:
        print("  content        token ids only: exports of this run have no message text  [--no-content]")
    if not args.verbose:
        print(f"other libraries' output (Ray, verl, torch, the runners) goes to {log_file} (-v shows it here)",
              flush=True)  # fmt: skip
    from lightning_otel.runs.run_report import close_run, trained_steps

    began = time.monotonic()
    result: Any = None
    failure = ""
    verdict = Verdict((), "")
    with lightning_otel.quiet(log_file, verbose=args.verbose) as terminal:
        try:
            base = model_folder_of(start.model, folder)
            folder.add_settings(model_folder=str(base.resolve()))
            kept = Path(earlier["trained_from"]) if earlier and earlier.get("trained_from") else None
            if kept is not None and kept.is_dir():  # resumed: the warm start the checkpoints were trained from
                started_from = kept
            else:
                started_from = warm_started(start, agent, tasks, base, terminal) or base
            folder.add_settings(trained_from=str(started_from.resolve()))
            algorithm = build_algorithm(plan, folder, started_from, start.extras)
            with policy_for_sft(plan, started_from, args.seed) as main_llm:
                result = trainer_for(start, algorithm, main_llm, folder.run_id).fit(agent, tasks, val_tasks)
            if earlier is not None and not trained_steps(folder)[0]:
                # resumed: the loop saw only the steps since the checkpoint; the run folder has every step's record
                raise lightning_otel.NothingTrained(
                    "no step of the run trained, before or after resuming (metrics.jsonl has every step's why)"
                )
            verdict = Verdict.of(result, temperature=plan.temperature)
            if plan.algorithm == "sft" and val_tasks and (folder.model / "config.json").is_file():
                verdict = measured_verdict(start, agent, val_tasks, started_from, folder.model)
        except (lightning_otel.NothingTrained, RunnersKeepDying) as exc:  # said in one line, not a traceback
            failure = f"FAILED: {exc}"
        except (ValueError, OSError, lightning_otel.ModelUnavailable) as exc:  # a bad config value, a port taken
            print(f"lightning-otel train: {exc}", file=sys.stderr)
            return 2
        model = exported_model(start, result) if not failure else None
    if failure and not verdict.why_none:
        verdict = Verdict((), "the run trained nothing")

    store = str(folder.path) if not args.collector else None
    lines = close_run(folder, plan, verdict, model=model, program=invoked_as(), store_shown=store)
    if result is not None and not verdict.judged:
        lines.insert(1, training_rise(result))
    print("\n" + "\n".join(lines) + f"\n({time.monotonic() - began:.0f} s)")
    if failure:
        print(f"lightning-otel train: {failure}", file=sys.stderr)
        return 1
    return NOT_IMPROVED_EXIT if verdict.judged and not verdict.improved else 0


def resumed_settings(start: Start) -> dict[str, Any] | None:
    """`--resume`: the settings.json the run's first start wrote (None: a new run)."""
    if not start.args.resume:
        return None
    return json.loads(start.folder.settings.read_text(encoding="utf-8"))


def keep_settings(start: Start, earlier: dict[str, Any] | None = None) -> None:
    """settings.json: the plan with each value's source, the other flags, the command line, the versions; a resumed
    run keeps its first start's and adds when and how it was resumed."""
    from lightning_otel.version import __version__

    args = start.args
    if earlier is not None:
        resumed = [*earlier.get("resumed", []), {"command": sys.argv, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}]
        start.folder.add_settings(resumed=resumed)
        return
    flags = {key: value for key, value in vars(args).items() if key not in ("func",)}
    start.folder.write_json(start.folder.settings, {
        "run_id": start.folder.run_id, "command": sys.argv, "model": start.model, "plan": start.plan.as_json(),
        "flags": flags, "lightning_otel": __version__, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    })  # fmt: skip


def model_folder_of(model: str, folder: RunFolder) -> Path:
    """The folder training starts from: a model by name (built once), the tiny random one (built in the run folder,
    so its adapter's base stays with it), or the folder given."""
    if model == "tiny":
        from lightning_otel.testing import save_tiny_model

        return Path(save_tiny_model(folder.path / "base_model"))
    return Path(lightning_otel.model_folder(model))


def warm_started(start: Start, agent: Any, tasks: list[Any], base: Path, terminal: Any) -> Path | None:
    """The warm start's model folder (None: none asked for): the base fine-tuned on the examples given, or on the
    calls the agent made against a teacher (`SFT` with the teacher as the agents' LLM)."""
    from lightning_otel.runs.warm_start import warm_start

    args, plan, folder = start.args, start.plan, start.folder
    rate = args.warm_start_learning_rate or plan.warm_start_learning_rate
    began = time.monotonic()
    if args.warm_start:
        examples = list(start.extras.warm_start)
        model, figures = warm_start(examples, base, folder.warm_start, learning_rate=rate,
                                    epochs=args.warm_start_epochs, seed=args.seed)  # fmt: skip
        count = len(examples)
    elif args.warm_start_teacher:
        model, figures = teacher_warm_start(start, agent, tasks[: args.warm_start_tasks], base, rate)
        count = int(figures["examples"])
    else:
        return None
    terminal.print(f"warm start: {count} examples, {args.warm_start_epochs:g} passes at {rate:.3g}, loss "
                   f"{figures['first_loss']:.3f} -> {figures['last_loss']:.3f}, {time.monotonic() - began:.0f} s "
                   f"({model})")  # fmt: skip
    return model


def teacher_warm_start(start: Start, agent: Any, tasks: list[Any], base: Path, rate: float) -> tuple[Path, dict]:
    """The agent run against the teacher on `tasks` (its own run on the collector); its selected calls in rollouts
    at --min-reward fine-tune the base (`lightning_otel.SFT`) into the warm start's model."""
    args, folder = start.args, start.folder
    teacher = lightning_otel.LLM(args.warm_start_teacher, args.warm_start_teacher_model)
    options = lightning_otel.TrainingOptions(schedule=lightning_otel.Schedule(batch_size=len(tasks), group_size=1),
                                             trackers=lightning_otel.Trackers(logger=()))  # fmt: skip
    model = folder.warm_start / "model"
    algorithm = lightning_otel.SFT(base, model, options, min_reward=args.min_reward, learning_rate=rate,
                                   epochs=args.warm_start_epochs, seed=args.seed)  # fmt: skip
    trainer = lightning_otel.Trainer(
        n_runners=args.runners,
        algorithm=algorithm,
        adapter={"agent_match": selected_calls(args)},
        initial_resources={"main_llm": teacher},
        progress=False,
        **collector_options(args, folder.store_url),
        settings=run_settings(args, f"{folder.run_id}-warm-start"),
        runner_options=runner_options(args, True),
    )  # fmt: skip
    final = trainer.fit(agent, tasks).final
    return model, {"examples": final["sft/examples"], "first_loss": final["sft/first_loss"],
                   "last_loss": final["sft/last_loss"]}  # fmt: skip


@contextlib.contextmanager
def policy_for_sft(plan: Plan, model: Path, seed: int) -> Iterator[Any]:
    """The LLM the agents call: the loop's gateway replaces it for the backends that serve their policy; SFT's
    rollouts sample the model itself (rejection sampling from the policy), served here as vLLM would."""
    if plan.algorithm != "sft":
        yield lightning_otel.LLM("http://replaced-by-the-gateway/v1", "agl-policy")
        return
    from lightning_otel.testing import serve_folder

    sampling = {"temperature": plan.temperature, "top_p": plan.top_p, "max_tokens": plan.max_tokens}
    with serve_folder(model, seed=seed) as url:
        yield lightning_otel.LLM(url, "agl-policy", sampling_parameters=sampling)


def trainer_for(start: Start, algorithm: Any, main_llm: Any, run_id: str) -> Any:
    args = start.args
    return lightning_otel.Trainer(
        n_runners=args.runners,
        algorithm=algorithm,
        adapter={"agent_match": agent_match(args), "process_rewards": args.process_rewards},
        initial_resources={"main_llm": main_llm},
        **collector_options(args, start.folder.store_url),
        settings=run_settings(args, run_id),
        runner_options=runner_options(args, args.capture_content),
    )


def agent_match(args: argparse.Namespace) -> str | dict[str, str] | None:
    """`--agent-match REGEX`, or the `--policy PATTERN=NAME` pairs as a mapping (a policy per agent)."""
    return dict(args.policies) if args.policies else args.agent_match


def selected_calls(args: argparse.Namespace) -> str | None:
    """One regex for the calls any policy trains (a warm start fine-tunes the base all of them share)."""
    if args.policies:
        return "|".join(f"(?:{pattern})" for pattern, _ in args.policies)
    return args.agent_match


def measured_verdict(start: Start, agent: Any, val_tasks: list[Any], before: Path, after: Path) -> Any:
    """SFT's verdict: the model it started from and the one it wrote, measured alike (`runs.evaluation`)."""
    from lightning_otel.runs.evaluation import HeldOutRewards
    from lightning_otel.runs.verdict import Verdict
    from lightning_otel.testing import serve_folder

    plan, args, folder = start.plan, start.args, start.folder
    greedy = {"temperature": 0.0, "top_p": 1.0, "max_tokens": plan.max_tokens}
    sampled = {"temperature": plan.temperature, "top_p": plan.top_p, "max_tokens": plan.max_tokens}
    measured = []
    for label, model in (("before", before), ("after", after)):
        with serve_folder(model, seed=args.seed) as url:
            algorithm = HeldOutRewards(url, "agl-policy", greedy, sampled, samples=plan.val_samples)
            trainer = trainer_for(start, algorithm, lightning_otel.LLM(url, "agl-policy"), f"{folder.run_id}-{label}")
            measured.append(trainer.fit(agent, None, val_tasks))
    (greedy_before, sampled_before), (greedy_after, sampled_after) = measured
    sampled_pair = (sampled_before, sampled_after) if sampled_before is not None else None
    return Verdict.from_rewards((greedy_before, greedy_after), sampled_pair, temperature=plan.temperature)


def exported_model(start: Start, result: Any) -> Path | None:
    """The run's model folder: exported from the last checkpoint (Tinker's adapter, verl's), or the one DPO and SFT
    wrote; `export.json` in it says what it was made from."""
    from lightning_otel.runs.model_export import export_model, latest_checkpoint

    plan, folder = start.plan, start.folder
    about = {"run_id": folder.run_id, "algorithm": plan.algorithm, "model": start.model}
    if plan.algorithm in ("dpo", "sft"):
        if not (folder.model / "config.json").is_file():
            return None
        info = folder.model / "export.json"
        info.write_text(json.dumps({"kind": f"{plan.algorithm} output", **about}, indent=1) + "\n", encoding="utf-8")
        return folder.model
    policies = tuple(dict.fromkeys(name for _, name in start.args.policies or ()))
    checkpoint = latest_checkpoint(folder.checkpoints, policies)
    if checkpoint is None or result is None:
        return None
    if policies:  # a policy per agent: each one's adapter in checkpoints/step-N/<policy>
        for policy in policies:
            export_model(checkpoint / policy, folder.model / policy, about={**about, "policy": policy})
        return folder.model
    return export_model(checkpoint, folder.model, about=about)


def training_rise(result: Any) -> str:
    """The training reward's first and last quarter: said when there is no held-out verdict (not a verdict)."""
    rewards = [reward for reward in result.rewards() if reward == reward]
    if not rewards:
        return "training reward: none (no step had a rewarded rollout)"
    quarter = max(1, len(rewards) // 4)
    first, last = statistics.fmean(rewards[:quarter]), statistics.fmean(rewards[-quarter:])
    return (f"training reward (sampled, not held out): first {quarter} steps {first:.3f} -> last {quarter} steps "
            f"{last:.3f}")  # fmt: skip


__all__ = ["train_planned"]
