"""The SQL row of the SmolLM2 learning table: the seeds' SQL agent (examples/spider, LangGraph, `agent_match="write"`)
trained by GRPO after a light warm start, over seeds, with every run reported.

    python -m benchmarks.sql_learning --seeds 0 1 2 --out runs/sql.json   # under an hour a seed
    python -m benchmarks.sql_learning --reuse                             # the table from kept runs
    python -m benchmarks.sql_learning --quick                             # the tiny model (tests)
    python -m benchmarks.sql_learning --seeds 0 1 2 --reward levels --learning-rate 6.5e-4 --out runs/sql-levels.json

Any other flag (`--reward`, `--learning-rate`, `--refill-tied-groups`, `--steps`, `--batch-size`, ...) is the
example's own (`train_sql_smollm2.py --help`), given to every seed; `--reuse` takes a kept run only with the same.
`--against WORKDIR` compares this arm with another's kept runs of the same seeds, question by question:

    python -m benchmarks.sql_learning --reuse --workdir benchmarks/results/sql-refill --refill-tied-groups 0.5 \\
        --steps 8 --against benchmarks/results/sql-dropped

Each seed is `python examples/spider/train_sql_smollm2.py --seed S` (that script's docstring has the design): the
untrained model, a warm start on 16 training questions answered by a scripted teacher, then 33 GRPO steps of
4 questions x 8 rollouts; 48 held-out questions, greedy, before and after. Printed: each run (accuracy and why the
misses missed), then pooled over the seeds the accuracy after the warm start against after GRPO (the gain and its
standard error; and paired by question, each held-out question a unit), and the untrained model's.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import lightning_otel as agl
from benchmarks._seeded_runs import finish, pooled_comparison, standard_error
from lightning_otel.agent_api.script_folder import import_from_folder

ROOT = Path(__file__).resolve().parents[1]
(train_sql_smollm2,) = import_from_folder(ROOT / "examples" / "spider", "train_sql_smollm2")


# the settings a kept run is reused under only if they are this invocation's
KEPT_SETTINGS = (
    "model", "steps", "batch_size", "group_size", "val_questions", "reward", "turns", "learning_rate",
    "refill_tied_groups", "distill_context", "distill_weight", "distill_alone", "distill_teacher",
)  # fmt: skip


def one_run(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    kept = args.workdir / f"seed-{seed}" / "run.json"
    example = train_sql_smollm2.parser()
    settings = example.parse_args(["--seed", str(seed), "--workdir", str(args.workdir), *args.example_flags])
    settings.model = args.model
    if args.reuse and kept.exists():  # a run an earlier session finished: its figures, as it wrote them
        run = json.loads(kept.read_text())
        if differences := settings_differ(run, settings, example):  # rerunning would write over the kept run
            raise SystemExit(f"--reuse: {kept.parent} ran with {', '.join(differences)}; pass its settings, or "
                             "leave out --reuse and give another --workdir to run these")  # fmt: skip
        return {**run, "by_question": by_question(run, kept.parent)}
    if args.quick:
        train_sql_smollm2.quick_sizes(settings)
    try:
        run = train_sql_smollm2.train_run(settings)
    except agl.NothingTrained as nothing:  # every group tied at every step: a run, reported, not a crash
        return {"seed": seed, "model": settings.model, "nothing_trained": str(nothing)}
    return {**run, "by_question": by_question(run, kept.parent)}


def settings_differ(run: dict[str, Any], settings: argparse.Namespace, example: argparse.ArgumentParser) -> list[str]:
    """Each of `KEPT_SETTINGS` the kept run had otherwise than `settings`, as `name its-value (not this-value)`.
    A run from before a setting was kept ran at its default (unchanged since), but for its steps: its rewards' count."""
    before = {"steps": len(run.get("train_reward", []))}
    differences = []
    for key in KEPT_SETTINGS:
        kept, wanted = run.get(key, before.get(key, example.get_default(key))), getattr(settings, key)
        if kept != wanted:
            differences.append(f"{key} {kept!r} (not {wanted!r})")
    return differences


def by_question(run: dict[str, Any], folder: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """Each held-out question's share of right answers after the warm start and after GRPO, greedy and sampled, from
    the run's kept answers (`val.episodes.jsonl`); a question with no answer in either phase is left out."""
    records = train_sql_smollm2.read_records(folder / "val.episodes.jsonl")
    blocks = train_sql_smollm2.validation_blocks(records, run["val_questions"], run.get("val_sampled", 0),
                                                 teacher_check="teacher_check" in run)  # fmt: skip
    pairs = {}
    for kind, suffix in (("greedy", ""), ("sampled", "_sampled")):
        before, after = (share_right(blocks.get(phase + suffix, [])) for phase in ("warm", "after"))
        pairs[kind] = {question: (before[question], after[question]) for question in before if question in after}
    return pairs


def share_right(records: list[dict[str, Any]]) -> dict[str, float]:
    answers: dict[str, list[bool]] = {}
    for record in records:
        answers.setdefault(record["question"], []).append(record["outcome"] == "right")
    return {question: sum(rights) / len(rights) for question, rights in answers.items()}


def paired_line(runs: list[dict[str, Any]], kind: str) -> str | None:
    """The gain paired by question: each seed's held-out question is one unit (its answers' share right after GRPO
    less after the warm start), so the standard error counts the questions, not the answers, and the pairing takes
    out how hard a question is. Units of one seed share a training run, so the error over the seeds' means is given
    beside it (`paired`)."""
    units = {run["seed"]: [after - before for before, after in run.get("by_question", {}).get(kind, {}).values()]
             for run in runs}  # fmt: skip
    return paired(units, f"{kind}, paired by question")


def against_lines(runs: list[dict[str, Any]], others: list[dict[str, Any]], name: str) -> list[str]:
    """This arm against another's kept runs of the same seeds (the same warm start and held-out questions): each
    seed's question one unit, its share right after training here less there, greedy and sampled."""
    theirs = {run["seed"]: run.get("by_question", {}) for run in others}
    lines = []
    for kind in ("greedy", "sampled"):
        units = {}
        for run in runs:
            mine, other = run.get("by_question", {}).get(kind, {}), theirs.get(run["seed"], {}).get(kind, {})
            units[run["seed"]] = [mine[question][1] - other[question][1] for question in mine if question in other]
        if line := paired(units, f"{kind}, against {name}, paired by question"):
            lines.append(line)
    return lines


def paired(units: dict[int, list[float]], label: str) -> str | None:
    """`label`: the mean of every seed's units, its standard error over the units, each seed's mean, and with two
    seeds or more the standard error of the seeds' means (the run-to-run spread, which the units' error leaves out)."""
    pooled = [unit for seed_units in units.values() for unit in seed_units]
    if len(pooled) < 2:
        return None
    gain, se = statistics.fmean(pooled), statistics.stdev(pooled) / math.sqrt(len(pooled))
    means = {seed: statistics.fmean(values) for seed, values in units.items() if values}
    seeds = ", ".join(f"{seed} {mean:+.3f}" for seed, mean in means.items())
    if len(means) > 1:
        spread = statistics.stdev(means.values()) / math.sqrt(len(means))
        seeds += f" (their standard error {spread:.3f}: {ratio(statistics.fmean(means.values()), spread)} x)"
    missing = ", ".join(str(seed) for seed, values in units.items() if not values)
    unkept = f"; no kept answers: seed {missing}" if missing else ""
    return (f"{label} over {len(pooled)} seed-questions: {gain:+.3f} +- {se:.3f} ({ratio(gain, se)} x its standard "
            f"error); per seed {seeds}{unkept}")  # fmt: skip


def ratio(value: float, error: float) -> str:
    """`value` in units of `error`; no spread at all (every unit moved alike, or none moved) said in words."""
    if error:
        return f"{value / error:+.1f}"
    return "no change in any unit: 0" if value == 0 else "every unit moved alike: no spread, so inf"


def summary(runs: list[dict[str, Any]], *, ties_allowed: bool) -> tuple[list[str], bool]:
    lines = [f"{'seed':>4} {'untrained':>10} {'warm start (+-SE)':>18} {'after (+-SE)':>18} "
             f"{'refused, warm -> after':>23} {'trained':>8} {'equal groups':>12} {'s':>6}"]  # fmt: skip
    complete, measured = True, []
    for run in runs:
        if "nothing_trained" in run:
            lines.append(f"{run['seed']:>4} trained nothing: {run['nothing_trained'][:300]}")
            complete &= ties_allowed
            continue
        n, warm, after = run["val_questions"], run["warm"]["right"], run["after"]["right"]
        lines.append(f"{run['seed']:>4} {run['untrained']['right']:>10.3f} {warm:>9.3f} "
                     f"+-{standard_error(warm, n):.3f} {after:>9.3f} +-{standard_error(after, n):.3f} "
                     f"{run['warm']['refused']:>14.2f} -> {run['after']['refused']:.2f} "
                     f"{run['trained_steps']:>4}/{len(run['train_reward']):<3} "
                     f"{run['zero_variance_groups']:>5.0f}/{run['groups']:<6.0f} {run['seconds']:>6.0f}")  # fmt: skip
        complete &= run["complete"] and run["trained_steps"] > 0
        measured.append(run)
    # pooled from the accuracy, not the validations' mean reward (the three-level reward's is not a share right)
    phases = [{"phase": phase, "seed": run["seed"],
               "validations": [{"success": run[key]["right"], "rollouts": run["val_questions"]}]}
              for phase, key in (("warm start", "warm"), ("after training", "after")) for run in measured]  # fmt: skip
    lines += ["greedy:", *pooled_comparison(phases, "phase", "warm start", "after training")]
    sampled = [run for run in measured if run.get("val_sampled")]
    if sampled:  # the policy GRPO trains: each question answered val_sampled times at temperature 1
        lines.append(sampled_line(sampled))
    lines += [line for kind in ("greedy", "sampled") if (line := paired_line(measured, kind))]
    if measured:  # greedy: every seed's untrained answers are the same
        untrained, n = measured[0]["untrained"]["right"], measured[0]["val_questions"]
        lines.append(f"untrained: {untrained:.3f} +- {standard_error(untrained, n):.3f} over {n} questions")
    else:
        lines.append("untrained: no run measured")
    return lines, complete


def sampled_line(runs: list[dict[str, Any]]) -> str:
    """Accuracy at the training temperature, each seed's and pooled, warm start -> after GRPO (answers of one question
    are not independent: the SE is a lower bound)."""
    answers = [(run["warm_sampled"]["right"], run["after_sampled"]["right"], run["warm_sampled"]["questions"])
               for run in runs]  # fmt: skip
    before, after, count = pooled_share(answers, 0), pooled_share(answers, 1), sum(n for *_, n in answers)
    gain_se = math.hypot(standard_error(before, count), standard_error(after, count))
    seeds = "; ".join(f"seed {run['seed']} {w:.3f} -> {a:.3f}" for run, (w, a, _) in zip(runs, answers, strict=True))
    return (
        f"sampled (temperature 1, {runs[0]['val_sampled']} a question): {seeds}; pooled {before:.3f} -> "
        f"{after:.3f} ({after - before:+.3f}; its SE at least {gain_se:.3f})"
    )


def pooled_share(answers: list[tuple[float, float, int]], phase: int) -> float:
    """The share right over every seed's answers in `phase` (0: the warm start, 1: after GRPO), weighted by count."""
    return sum(shares[phase] * n for *shares, n in answers) / sum(n for *_, n in answers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--workdir", type=Path, default=ROOT / "examples" / "spider" / "runs" / "smollm2",
                        help="each seed's folder (its answers, its log, run.json) goes here")  # fmt: skip
    parser.add_argument("--out", type=Path, help="write every run's numbers here (JSON)")
    parser.add_argument("--reuse", action="store_true", help="read a seed's finished run from --workdir, not rerun it")
    parser.add_argument("--quick", action="store_true", help="the tiny model, a few questions: that it runs (tests)")
    parser.add_argument("--against", type=Path, metavar="WORKDIR",
                        help="another arm's kept runs of these seeds, compared question by question")  # fmt: skip
    args, args.example_flags = parser.parse_known_args()
    train_sql_smollm2.parser().parse_args(args.example_flags)  # a flag neither knows: said now, not after a seed
    if args.quick:  # a scratch folder, not the example's runs
        args.seeds, args.workdir = [0], Path(tempfile.mkdtemp(prefix="agl-sql-learning-"))
    runs = []
    for seed in args.seeds:
        runs.append(one_run(seed, args))
        shown = ("seed", "untrained", "warm", "after", "warm_sampled", "after_sampled", "seconds")
        print(json.dumps({key: runs[-1].get(key) for key in shown}), flush=True)
    if args.quick:
        shutil.rmtree(args.workdir, ignore_errors=True)
    lines, complete = summary(runs, ties_allowed=args.quick)
    if args.against:
        lines += against_lines(runs, kept_runs(args.against, args.seeds), str(args.against))
    return finish(runs, lines, complete, args.out)


def kept_runs(workdir: Path, seeds: list[int]) -> list[dict[str, Any]]:
    """The finished runs of `seeds` kept in `workdir` (another arm's, whatever its settings), with their answers."""
    kept = [(workdir / f"seed-{seed}", json.loads(path.read_text())) for seed in seeds
            if (path := workdir / f"seed-{seed}" / "run.json").exists()]  # fmt: skip
    return [{**run, "by_question": by_question(run, folder)} for folder, run in kept if "nothing_trained" not in run]


if __name__ == "__main__":
    sys.exit(main())
