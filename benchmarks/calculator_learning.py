"""The tool-calling row of the SmolLM2 learning table: the calculator agent (examples/calculator, LangGraph's ReAct
agent) trained by GRPO after a warm start on arithmetic drills, over seeds, with every run reported.

    python -m benchmarks.calculator_learning --seeds 0 1 2 --out runs/calculator.json   # about 40 min a seed
    python -m benchmarks.calculator_learning --algorithms grpo dpo --seeds 0            # DPO at equal rollouts
    python -m benchmarks.calculator_learning --reuse --algorithms grpo dpo               # the table from kept runs
    python -m benchmarks.calculator_learning --algorithms distill distill-alone --seeds 0  # self-distillation
    python -m benchmarks.calculator_learning --quick                       # the tiny model, grpo and distill-alone

Each seed is `python examples/calculator/train_calculator.py train --seed S` (that script's docstring has the
design): the untrained model, a warm start on 16 drills against a scripted teacher (the tool call's format, not the
word problems), then 16 GRPO steps of 4 problems x 8 rollouts on the word problems; 48 held-out problems, greedy,
before and after (`--algorithms grpo dpo`: online DPO too, from the same warm start at equal rollouts). Printed:
each run, then pooled over the seeds the accuracy after the warm start against after training (the gain and its
standard error) for each algorithm, each other arm against GRPO at the end, and the untrained model's.

`distill` and `distill-alone` are GRPO's schedule with on-policy self-distillation (added to GRPO's advantage, or
alone): the policy with `DISTILL_CONTEXT` (the problem's expression and answer, `--distill-context` to change it) in
a system turn scores the student's sampled tokens; the teacher check runs first and stops a run whose teacher is
not right more often than the student (the held-out problems sampled once each). `distill-frozen` and
`distill-frozen-alone` are the same with the teacher frozen at the warm start (`--distill-teacher warm`).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import lightning_otel as agl
from benchmarks._seeded_runs import finish, pooled_comparison, standard_error
from lightning_otel.agent_api.script_folder import import_from_folder

ROOT = Path(__file__).resolve().parents[1]
(train_calculator,) = import_from_folder(ROOT / "examples" / "calculator", "train_calculator")
ARMS = ("grpo", "dpo", "distill", "distill-alone", "distill-frozen", "distill-frozen-alone")
# the teacher's privileged context: what the tool call should say and what the reply should end with
DISTILL_CONTEXT = "For this problem, call the calculate tool with {expression}; the answer is {answer}."


def arm_flags(arm: str, context: str, *, check: bool = True) -> list[str]:
    """`train_calculator.py train`'s flags for an arm (`check`: the self-distilling arms' teacher check; a frozen
    teacher is the warm start, the self-distilling teacher of the first step, so its arms run none)."""
    if arm in ("grpo", "dpo"):
        return ["--algorithm", arm]
    frozen = arm.startswith("distill-frozen")
    return (
        ["--distill-context", context]
        + (["--distill-teacher", "warm"] if frozen else [])
        + (["--teacher-check"] if check and not frozen else [])
        + (["--distill-alone"] if arm.endswith("-alone") else [])
    )


def one_run(arm: str, seed: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    kept = workdir / f"seed-{seed}" / ("run.json" if arm == "grpo" else f"run-{arm}.json")
    if args.reuse and kept.exists():  # a run an earlier session finished: its figures, as it wrote them
        run = {**json.loads(kept.read_text()), "arm": arm}
        if run.get("model") == args.model and run.get("distill_context", "") == (
            args.distill_context if arm.startswith("distill") else ""
        ):
            return run
    settings = train_calculator.parser().parse_args(
        [
            "train",
            "--seed",
            str(seed),
            "--workdir",
            str(workdir),
            *arm_flags(arm, args.distill_context, check=not args.quick),
        ]
    )
    settings.model, settings.quick = args.model, args.quick
    if args.quick:
        train_calculator.quick_sizes(settings)
    try:
        return train_calculator.train_run(settings)
    except agl.NothingTrained as nothing:  # every group tied at every step, or the teacher check stopped the run
        return {"seed": seed, "arm": arm, "model": settings.model, "nothing_trained": str(nothing)}


def summary(runs: list[dict[str, Any]], arms: list[str], *, ties_allowed: bool) -> tuple[list[str], bool]:
    lines = [f"{'arm':<13} {'seed':>4} {'untrained':>10} {'warm start (+-SE)':>18} {'after (+-SE)':>18} "
             f"{'called':>13} {'trained':>8} {'equal groups':>12} {'s':>6}"]  # fmt: skip
    complete, measured = True, []
    for run in runs:
        if "nothing_trained" in run:
            lines.append(f"{run['arm']:<13} {run['seed']:>4} trained nothing: {run['nothing_trained'][:400]}")
            complete &= ties_allowed
            continue
        n, untrained = run["val_problems"], run["untrained"]["right"]
        warm, after = run["warm"]["right"], run["after"]["right"]
        lines.append(f"{run['arm']:<13} {run['seed']:>4} {untrained:>10.3f} {warm:>9.3f} "
                     f"+-{standard_error(warm, n):.3f} {after:>9.3f} +-{standard_error(after, n):.3f} "
                     f"{run['warm']['called']:>5.2f} -> {run['after']['called']:.2f} "
                     f"{run['trained_steps']:>4}/{len(run['train_reward']):<3} "
                     f"{run['zero_variance_groups']:>5.0f}/{run['groups']:<6.0f} {run['seconds']:>6.0f}")  # fmt: skip
        if "teacher_check" in run:
            student, teacher = run["teacher_check"]["student"]["right"], run["teacher_check"]["teacher"]["right"]
            lines.append(f"{'':<13} {'':>4} teacher check, held-out problems sampled: student {student:.3f}, "
                         f"teacher {teacher:.3f}")  # fmt: skip
        complete &= run["complete"] and run["trained_steps"] > 0
        measured.append(run)
    for arm in arms:  # after the warm start against after training, pooled over the seeds
        ran = [run for run in measured if run["arm"] == arm]
        phases = [{"phase": "warm start", **run, "validations": run["validations"][:1]} for run in ran]
        phases += [{"phase": f"after {arm}", **run} for run in ran]
        lines += [f"{arm}: {line}" for line in pooled_comparison(phases, "phase", "warm start", f"after {arm}")]
    for arm in arms if "grpo" in arms else ():  # each other arm against GRPO at the end
        if arm != "grpo":
            lines += pooled_comparison(measured, "arm", "grpo", arm, either_way=True)
    firsts = {run["seed"]: run for run in measured}.values()  # greedy: one seed's untrained episodes are all seeds'
    count = sum(run["val_problems"] for run in firsts)
    right = sum(run["untrained"]["right"] * run["val_problems"] for run in firsts) / count if count else math.nan
    lines.append(f"untrained: {right:.3f} +- {standard_error(right, count):.3f} over {count} problems")
    return lines, complete


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--algorithms", nargs="+", choices=ARMS, default=["grpo"], help="the arms, each seed")
    parser.add_argument("--distill-context", default=DISTILL_CONTEXT, metavar="TEMPLATE",
                        help="the distill arms' teacher context ({question}, {expression}, {answer})")  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=ROOT / "examples" / "calculator" / "runs",
                        help="each seed's folder (its episodes, its log, run.json) goes here")  # fmt: skip
    parser.add_argument("--out", type=Path, help="write every run's numbers here (JSON)")
    parser.add_argument("--reuse", action="store_true", help="read a seed's finished run from --workdir, not rerun it")
    parser.add_argument("--quick", action="store_true", help="the tiny model, a few problems: that it runs (tests)")
    args = parser.parse_args()
    if args.quick:  # a scratch folder, not the example's runs; the tiny model's teacher is no better: no check
        args.seeds, args.workdir = [0], Path(tempfile.mkdtemp(prefix="agl-calculator-"))
        args.algorithms = ["grpo", "distill-alone"]
    runs = []
    for seed in args.seeds:
        for arm in args.algorithms:  # the second arm of a seed reuses its warm start
            runs.append(one_run(arm, seed, args, args.workdir))
            shown = ("arm", "seed", "untrained", "warm", "after", "seconds")
            print(json.dumps({key: runs[-1].get(key) for key in shown}), flush=True)
    if args.quick:
        shutil.rmtree(args.workdir, ignore_errors=True)
    lines, complete = summary(runs, args.algorithms, ties_allowed=args.quick)
    return finish(runs, lines, complete, args.out)


if __name__ == "__main__":
    sys.exit(main())
