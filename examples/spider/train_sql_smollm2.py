"""The SQL agent trained on a model that can read: SmolLM2-135M-Instruct, a warm start then GRPO, on 2 CPU cores.

    python train_sql_smollm2.py --seed 0        # under an hour: untrained, warm start, 33 GRPO steps, held-out accuracy
    python train_sql_smollm2.py --quick         # the tiny model, a few questions: that it runs (the tests)

The agent is the tutorial's LangGraph graph with one write turn (the CPU profile's: `agent_match="write"`, the
query executed, no check), its reward Spider's execution match. A run:

1. the untrained model's execution accuracy on held-out questions (the first `--val-questions` of the validation
   split, greedy), with why each miss missed (no query, refused by SQLite, other rows); greedy, so the seeds share it;
2. a warm start that shows the answer's format: the agent answers `--warm-questions` training questions against the
   scripted teacher (the gold query in a sqlite block), and `lightning_otel.SFT` fine-tunes the model on those
   write_query calls, lightly (2 passes at 1e-4): the untrained model writes sentences where a query goes;
3. GRPO on the other training questions with the local Tinker engine (LoRA rank 32, learning rate 4.3e-4: a third of
   the Tinker cookbook's supervised rule for SmolLM2's width, 1.3e-3, which broke more greedy answers over 3 seeds;
   docs/models.md), `--steps` (33: at 11 only the sampled policy learned, over 3 seeds) of `--batch-size` questions x
   `--group-size` rollouts at temperature 1, replies of at most 64 tokens; the held-out questions validated greedily
   after the warm start and at the end, and at temperature 1 (`--val-sampled` samples a question), the policy GRPO
   trains. Levers (issue 70): `--reward levels` (-1 no runnable SQL, 0 wrong, +1 right), `--refill-tied-groups`,
   `--distill-context 'A correct query: {query}'` (on-policy self-distillation: the policy, shown the gold query,
   scores the student's tokens; `--distill-alone`: that signal without GRPO's reward advantage; `--teacher-check`:
   first, the held-out questions answered sampled by the student and by that teacher, and the run stopped unless the
   teacher is right more often), `--distill-teacher warm` (the teacher frozen at the warm start, not the policy as
   last published), `--turns 3` (the tutorial's write, check, rewrite loop: the error of a query SQLite refused
   reaches the rewrite).

Every figure of the run goes to `<workdir>/seed-<S>/run.json`; `benchmarks/sql_learning.py` runs the seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from prepare_dataset import data_ready, default_data_dir, prepare
from recorded_sql_agent import OUTCOMES, RecordingSQLAgent
from warm_start import teacher_warm_start

import lightning_otel as agl

HERE = Path(__file__).resolve().parent
AGENT_MATCH = "write"  # write_query's calls are the samples
MAX_TOKENS = 64  # the longest gold query (a join) in its sqlite block fits


def outcome_shares(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How a set of answers went: the share of each outcome (right is the execution accuracy)."""
    counts = Counter(record["outcome"] for record in records)
    return {"questions": len(records), **{kind: counts[kind] / len(records) if records else math.nan
                                         for kind in OUTCOMES}}  # fmt: skip


def read_records(path: Path) -> list[dict[str, Any]]:
    """One record a rollout, its last attempt's (the one that counted), where the rollout's first attempt wrote."""
    by_rollout: dict[Any, dict[str, Any]] = {}
    for number, line in enumerate(path.read_text().splitlines() if path.exists() else []):
        record = json.loads(line)
        by_rollout[record.get("rollout_id") or number] = record  # an update keeps the key's first place
    return list(by_rollout.values())


def accuracy(folder: Path, tasks: list[dict[str, Any]], records: Path, data_dir: Path, log: Path) -> dict[str, Any]:
    """The agent on `tasks` against `folder` served as vLLM would serve it, greedy: the outcome shares."""
    from lightning_otel.testing import serve_folder  # torch

    records.unlink(missing_ok=True)
    with agl.quiet(log), serve_folder(folder) as base_url:
        llm = agl.LLM(base_url, "agl-policy", sampling_parameters={"temperature": 0.0, "max_tokens": MAX_TOKENS})
        trainer = agl.Trainer(n_runners=2, adapter={"agent_match": AGENT_MATCH}, initial_resources={"main_llm": llm})
        trainer.dev(RecordingSQLAgent(data_dir, records), val_dataset=tasks, print_spans=False)
    return outcome_shares(read_records(records))


def warm_start(args: argparse.Namespace, model: Path, tasks: list[dict[str, Any]], agent: RecordingSQLAgent,
               work: Path, log: Path) -> tuple[Path, float]:  # fmt: skip
    """The warm-started folder and the SFT's seconds (a folder this seed's earlier run left is reused)."""
    warm, done = work / "model-warm", work / "warm_start.json"
    if done.exists() and (warm / "config.json").exists():
        print(f"warm start: reused {warm} (this seed's earlier run)", flush=True)
        return warm, json.loads(done.read_text())["sft_seconds"]
    with agl.quiet(log):
        sft = teacher_warm_start(
            agent, tasks, model, warm, teacher_url=None, teacher_model="scripted-teacher", collector=None,
            n_runners=2, fine_tune={"epochs": args.sft_epochs, "learning_rate": args.sft_learning_rate,
                                    "batch_size": 8, "seed": args.seed},
        )  # fmt: skip
    seconds = sft.final["sft/train_seconds"]
    print(f"warm start: {sft.final['sft/examples']:.0f} examples from {len(tasks)} training questions against the "
          f"scripted teacher, SFT in {seconds:.0f}s", flush=True)  # fmt: skip
    figures = {"questions": len(tasks), "examples": sft.final["sft/examples"], "sft_seconds": seconds}
    done.write_text(json.dumps(figures))
    return warm, seconds


def train_run(args: argparse.Namespace) -> dict[str, Any]:
    """One seed: the untrained model, the warm start, then GRPO; every figure of the run (also as JSON)."""
    if (args.distill_alone or args.teacher_check or args.distill_teacher) and not args.distill_context:
        raise SystemExit("--distill-alone, --distill-teacher and --teacher-check need the teacher's --distill-context")
    if args.distill_teacher and args.teacher_check:
        raise SystemExit("--teacher-check measures the policy as its own teacher; a frozen --distill-teacher is that "
                         "teacher at the first step: run the check with self-distillation")  # fmt: skip
    started = time.monotonic()
    data_dir = default_data_dir()
    if not data_ready(data_dir):
        prepare(data_dir)
    root = Path(args.workdir).resolve()
    work = root / f"seed-{args.seed}"
    work.mkdir(parents=True, exist_ok=True)
    log = work / "train.log"
    from lightning_otel.testing import model_or_tiny  # torch

    model = model_or_tiny(args.model, work, seed=args.seed)
    print(f"{args.model} (seed {args.seed}): other libraries' output goes to {log}", flush=True)
    val_tasks = agl.load_tasks(data_dir / "test_dev_500.parquet")[: args.val_questions]
    train_pool = agl.load_tasks(data_dir / "train_spider.parquet")
    random.Random(args.seed + 500).shuffle(train_pool)
    warm_tasks, train_tasks = train_pool[: args.warm_questions], train_pool[args.warm_questions :]

    # greedy: the untrained model's answers are the same whichever seed asks (the quick mode's model is the seed's)
    untrained_file = (work if args.model == "tiny" else root) / f"untrained-{model.name}.episodes.jsonl"
    if len(read_records(untrained_file)) == len(val_tasks):
        untrained = outcome_shares(read_records(untrained_file))
    else:
        untrained = accuracy(model, val_tasks, untrained_file, data_dir, log)
    print(f"untrained, {len(val_tasks)} held-out questions, greedy: right {untrained['right']:.3f}, refused by "
          f"SQLite {untrained['refused']:.3f}, no query {untrained['no query']:.3f}", flush=True)  # fmt: skip
    # the warm start shows the format on the first write (the scripted teacher answers it right); GRPO and its
    # validations run the agent with --turns
    warm, sft_seconds = warm_start(args, model, warm_tasks, RecordingSQLAgent(data_dir), work, log)
    agent = RecordingSQLAgent(data_dir, levels=args.reward == "levels", turns=args.turns)

    records = {mode: work / f"{mode}.episodes.jsonl" for mode in ("train", "val")}
    for path in records.values():
        path.unlink(missing_ok=True)
    tasks = {mode: [{**task, "record_file": str(records[mode])} for task in chosen]
             for mode, chosen in (("train", train_tasks), ("val", val_tasks))}  # fmt: skip
    print(f"GRPO: {args.steps} steps of {args.batch_size} questions x {args.group_size} rollouts, temperature 1, "
          f"reward {args.reward}, learning rate {args.learning_rate:g}"
          + (f", {args.turns} turns (write, check, rewrite)" if args.turns > 1 else "")
          + (f", tied groups refilled (at most {args.refill_tied_groups:g}x)" if args.refill_tied_groups else "")
          + (f", {'distilled from the frozen ' + args.distill_teacher if args.distill_teacher else 'self-distilled'}"
             f" (weight {args.distill_weight:g}{', alone' if args.distill_alone else ''}) with {args.distill_context!r}"
             if args.distill_context else "")
          + f"; validation on the {len(val_tasks)} held-out questions, greedy"
          + (f" and {args.val_sampled} samples each at temperature 1" if args.val_sampled else ""),
          flush=True)  # fmt: skip
    trained_started = time.monotonic()
    with agl.quiet(log) as terminal:
        distilled: list[dict[str, float | None]] = []  # each step's reverse KL to the teacher and its logprob, kept

        def progress(step: int, metrics: dict[str, float]) -> None:
            kl = metrics.get("distill/reverse_kl")
            if kl is not None:
                distilled.append({"reverse_kl": kl, "teacher_logprob": metrics.get("distill/teacher_logprob")})
            terminal.print(f"  step {step}: reward {metrics.get('rollout/reward_mean', math.nan):.3f}, "
                           f"{metrics.get('training/samples_with_advantage', 0):.0f} samples with an advantage, "
                           + (f"reverse KL to the teacher {kl:.3f}, " if kl is not None else "")
                           + f"{time.monotonic() - trained_started:.0f}s")  # fmt: skip

        options = agl.TrainingOptions(
            schedule=agl.Schedule(batch_size=args.batch_size, group_size=args.group_size, max_steps=args.steps,
                                  shuffle=True, epochs=1000, val_every=args.steps, seed=args.seed,
                                  val_sampled=args.val_sampled),
            sampling=agl.Sampling(temperature=1.0, max_tokens=MAX_TOKENS),
            validation_sampling=agl.Sampling(temperature=0.0, max_tokens=MAX_TOKENS),
            trackers=agl.Trackers(logger=()), on_step=progress, refill_tied_groups=args.refill_tied_groups,
            distillation=agl.Distillation(weight=args.distill_weight, context=args.distill_context,
                                          alone=args.distill_alone, check=args.teacher_check,
                                          teacher=frozen_teacher(args, warm))
            if args.distill_context else None,
        )  # fmt: skip
        engine = agl.LocalEngine(warm, rank=32, seed=args.seed)
        trainer = agl.Trainer(n_runners=2, algorithm=agl.Tinker(engine, options, learning_rate=args.learning_rate),
                              adapter={"agent_match": AGENT_MATCH}, progress=False)  # fmt: skip
        result = trainer.fit(agent, tasks["train"], tasks["val"])
    val_records, train_records = read_records(records["val"]), read_records(records["train"])
    per_step = args.batch_size * args.group_size
    run = {
        "model": args.model, "seed": args.seed, "val_questions": len(val_tasks), "untrained": untrained,
        "steps": args.steps, "batch_size": args.batch_size, "group_size": args.group_size,
        "reward": args.reward, "turns": args.turns, "learning_rate": args.learning_rate,
        "refill_tied_groups": args.refill_tied_groups,
        "distill_context": args.distill_context, "distill_weight": args.distill_weight,
        "distill_alone": args.distill_alone, "distill_teacher": args.distill_teacher, "distill": distilled,
        # the validations ran one after the other, each greedy then sampled: the warm start's, then the end's
        **validation_shares(val_records, len(val_tasks), args.val_sampled, teacher_check=args.teacher_check),
        **result.figures(),
        "train_first": outcome_shares(train_records[: 3 * per_step]),
        "train_last": outcome_shares(train_records[-3 * per_step:]),
        "sft_seconds": sft_seconds, "train_seconds": time.monotonic() - trained_started,
        "seconds": time.monotonic() - started,
    }  # fmt: skip
    checked = sum(check_answers(len(val_tasks), args.val_sampled)) if args.teacher_check else 0
    run["complete"] = (len(val_records) == 2 * len(val_tasks) * (1 + args.val_sampled) + checked
                       and all(v["rollouts"] for v in run["validations"]))  # fmt: skip
    (work / "run.json").write_text(json.dumps(run, indent=1))
    return run


def frozen_teacher(args: argparse.Namespace, warm: Path) -> Path | None:
    """`--distill-teacher`: 'warm' (the seed's warm start, frozen) or a model folder; None: self-distillation."""
    if not args.distill_teacher:
        return None
    return warm if args.distill_teacher == "warm" else Path(args.distill_teacher)


def validation_shares(
    records: list[dict[str, Any]], questions: int, sampled: int, *, teacher_check: bool = False
) -> dict[str, Any]:
    """The two validations' outcome shares from their answers in the order they ran (the warm start's greedy, its
    `sampled` samples a question at temperature 1, the teacher check's answers, then the end's): `warm`, `after`,
    `*_sampled` and `teacher_check` (the teacher's: the policy with the gold query in its context)."""
    blocks = validation_blocks(records, questions, sampled, teacher_check=teacher_check)
    return {"val_sampled": sampled, **{name: outcome_shares(block) for name, block in blocks.items()}}


def validation_blocks(
    records: list[dict[str, Any]], questions: int, sampled: int, *, teacher_check: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """The validations' answers by phase (`warm`, `warm_sampled`, `teacher_check`, `after`, `after_sampled`), split
    by the order they ran; `validation_shares` has the order."""
    block, blocks = questions * (1 + sampled), {}
    if teacher_check:  # the check's answers ran after the warm start's
        student, teacher = check_answers(questions, sampled)
        blocks["teacher_check"] = records[block + student : block + student + teacher]
        records = records[:block] + records[block + student + teacher :]
    for name, first in (("warm", records[:block]), ("after", records[block : 2 * block])):
        blocks[name] = first[:questions]
        if sampled:
            blocks[f"{name}_sampled"] = first[questions:]
    return blocks


def check_answers(questions: int, sampled: int) -> tuple[int, int]:
    """The teacher check's answers, the student's then the teacher's: the student's are the warm start's sampled
    validation when there is one (none of its own), else a sample a question; the teacher's as many."""
    return (0 if sampled else questions), questions * (sampled or 1)


def standard_error(success: float, count: int) -> float:
    return math.sqrt(success * (1 - success) / count) if count else math.nan


def quick_sizes(args: argparse.Namespace) -> None:
    """The quick mode's sizes: the tiny model, 4 warm-start questions, one step of 2 x 2 rollouts, 2 held out."""
    args.model, args.warm_questions, args.steps, args.val_questions = "tiny", 4, 1, 2
    args.batch_size, args.group_size, args.val_sampled = 2, 2, 1


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="smollm2", help="a model name (smollm2, tiny) or folder")
    parser.add_argument("--workdir", default=str(HERE / "runs" / "smollm2"), help="each seed's folder goes here")
    parser.add_argument("--warm-questions", type=int, default=16, help="training questions the teacher answers")
    parser.add_argument("--sft-epochs", type=float, default=2.0)
    parser.add_argument("--sft-learning-rate", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=33, help="GRPO steps (at 11 only the sampled policy learned)")
    parser.add_argument("--batch-size", type=int, default=4, help="questions a step")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts a question (GRPO's group)")
    parser.add_argument("--val-questions", type=int, default=48)
    parser.add_argument("--learning-rate", type=float, default=4.3e-4, help="GRPO's (LoRA rank 32)")
    parser.add_argument("--distill-context", default="", metavar="TEMPLATE",
                        help="on-policy self-distillation: the policy with this context (a task's fields, e.g. "
                             "'A correct query: {query}') scores the sampled tokens")  # fmt: skip
    parser.add_argument("--distill-weight", type=float, default=1.0, help="the teacher's per-token signal's weight")
    parser.add_argument("--distill-alone", action="store_true",
                        help="train on the teacher's signal only, not GRPO's reward advantage")  # fmt: skip
    parser.add_argument("--distill-teacher", default="", metavar="FOLDER",
                        help="a frozen teacher with the --distill-context: 'warm' (the seed's warm-started model) or "
                             "a model folder; default: the policy itself as last published")  # fmt: skip
    parser.add_argument("--teacher-check", action="store_true",
                        help="before GRPO, the held-out questions answered at temperature 1 by the student and by "
                             "the teacher; the run stops unless the teacher is right more often")  # fmt: skip
    parser.add_argument("--val-sampled", type=int, default=2, metavar="K",
                        help="each validation also samples every held-out question K times at temperature 1 (the "
                             "policy GRPO trains; 0: greedy only)")  # fmt: skip
    parser.add_argument("--reward", choices=("match", "levels"), default="match",
                        help="match: 1 right, else 0 (the tutorial's); levels: +1 right, 0 ran but wrong, -1 no "
                             "query SQLite runs")  # fmt: skip
    parser.add_argument("--refill-tied-groups", type=float, default=0.0, metavar="FACTOR",
                        help="replace a group whose rewards tie with further questions' groups, at most FACTOR x "
                             "the step's questions more (0: off)")  # fmt: skip
    parser.add_argument("--turns", type=int, default=1, choices=(1, 2, 3),
                        help="write turns: 1 (the CPU profile), or the tutorial's write, check, rewrite loop (3); "
                        "every write and rewrite trains")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="the tiny model, a few questions (the tests)")
    return parser


def main() -> int:
    args = parser().parse_args()
    if args.quick:
        quick_sizes(args)
    try:
        run = train_run(args)
    except agl.NothingTrained as nothing:  # every group tied at every step: said, and a failed run
        print(f"trained nothing: {nothing}", file=sys.stderr)
        return 0 if args.quick else 1
    n = run["val_questions"]
    print(f"\nheld-out execution accuracy ({n} questions, greedy):")
    for label, key in (("untrained", "untrained"), ("after the warm start", "warm"), ("after GRPO", "after")):
        shares = run[key]
        print(f"  {label:<21} {shares['right']:.3f} +- {standard_error(shares['right'], n):.3f}  (refused by "
              f"SQLite {shares['refused']:.2f}, other rows {shares['other rows']:.2f}, no query "
              f"{shares['no query']:.2f})")  # fmt: skip
    print(f"GRPO trained {run['trained_steps']} of {len(run['train_reward'])} steps ({run['zero_variance_groups']:.0f} "
          f"of {run['groups']:.0f} groups with equal rewards); {run['seconds']:.0f}s in all; "
          f"{Path(args.workdir) / f'seed-{args.seed}'}")  # fmt: skip
    if not run["complete"]:
        print("not a measurement: a validation answer left no record", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
