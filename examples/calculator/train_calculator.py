"""Train the calculator agent (calculator_agent.py, LangGraph) with the Tinker-shaped backend on this machine.

    python train_calculator.py dryrun                   # 4 problems against a scripted teacher: spans, samples, rewards
    python train_calculator.py train --seed 0           # SmolLM2: warm start on drills, then GRPO (about 40 min)
    python train_calculator.py train --seed 0 --algorithm dpo   # the same, online DPO instead of GRPO
    python train_calculator.py train --quick            # the tiny model, a few problems: that it runs (the tests)

Only the agent's calls are samples (`agent_match="agent"`: LangGraph's node name); the tool runs are the `tools`
node's. `train`:

1. the untrained model's accuracy on held-out word problems (greedy, through the agent);
2. a warm start that shows the tool call's format and nothing of the task: the agent answers bare arithmetic drills
   ("What is 23 * 17?") against a scripted teacher that calls the calculator with the question's expression, and
   `lightning_otel.SFT` fine-tunes the model on those calls, with the tools the requests offered;
3. GRPO on the word problems (the local Tinker engine: LoRA rank 32, learning rate 1.3e-3, the Tinker cookbook's
   rule for SmolLM2's width), outcome reward only (1 when the final number is the answer); the held-out problems
   are validated greedily before and after.
Reading the question's words into an expression (which numbers, which operation) is what GRPO has to learn: the
drills never show it. `--algorithm dpo` trains online DPO instead, at equal rollouts: the same schedule, the same
LoRA except on the output layer (which SmolLM2 ties to its embeddings), a group's best and worst rollouts as the pair
when their rewards differ, at the call where both saw the same prompt (the call to the calculator), learning rate
2e-4, beta 0.1, two passes; a second run of a seed reuses its warm start.

`--distill-context 'The expression for the calculate tool: {expression}'` adds on-policy self-distillation: the
policy, shown the problem's expression (or any task field) in a system turn the agent never sees, scores the tokens
the student sampled, and that per-token signal is added to GRPO's advantage (`--distill-alone`: trained alone).
`--teacher-check` first answers the held-out problems sampled as the student and as that teacher, and stops the run
unless the teacher is right more often. Such a run is kept as `run-distill.json` (`run-distill-alone.json`).
`--distill-teacher warm` makes the teacher the warm-started model, frozen, with the same context (or any model
folder with SmolLM2's tokenizer): a self-distilling teacher is the policy as last published and moves with the
student; a frozen one does not (`run-distill-frozen.json`, `run-distill-frozen-alone.json`; no teacher check: at the
first step the frozen teacher is the self-distilling one, whose check a self-distillation run reports).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from calculator_agent import arithmetic_drills, calculator_rollout, word_problems
from model_with_tools import with_tools_template
from warm_start import AGENT_MATCH, teacher_reply, teacher_warm_start

import lightning_otel as agl
from lightning_otel.testing import OpenAITestServer

HERE = Path(__file__).resolve().parent
VAL_SEED = 10_000  # the held-out problems' seed: no training seed draws them
MAX_TOKENS = 64  # a reply's length: a call or a final answer fits; copying the question into the call does not


def dryrun(args: argparse.Namespace) -> int:
    """A few problems through Trainer.dev against the scripted teacher: spans, the agent's samples, rewards."""
    tasks = word_problems(args.n_tasks, seed=args.seed)
    with OpenAITestServer(replies=teacher_reply) as teacher:
        trainer = agl.Trainer(
            n_runners=1,
            adapter={"agent_match": AGENT_MATCH},
            initial_resources={"main_llm": agl.LLM(teacher.base_url, "scripted-teacher")},
        )
        result = trainer.dev(calculator_rollout, tasks, gateway=True, print_spans=args.verbose)
    samples = [triplet for batch in result.train for triplet in batch.triplets()]
    agents = sorted({triplet.agent_name or "?" for triplet in samples})
    rewards = [reward for batch in result.train for reward in batch.rewards().values() if reward is not None]
    print(f"\ndry run: {len(tasks)} problems, mean reward {statistics.fmean(rewards):.2f}, {len(samples)} samples "
          f"from agents {agents}")  # fmt: skip
    # each problem: the call that asks for the calculator and the call that reads its answer
    if agents != [AGENT_MATCH] or len(samples) != 2 * len(tasks) or statistics.fmean(rewards) != 1.0:
        print(f"expected two samples a problem, from the {AGENT_MATCH!r} agent only, all rewarded", file=sys.stderr)
        return 1
    return 0


def episode_figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What a set of episodes did: right, called the calculator, a call left unparsed in the text, no final number."""
    count = len(records)
    share = (lambda key: sum(bool(r[key]) for r in records) / count) if count else (lambda key: math.nan)
    return {"episodes": count, "right": share("reward"), "called": share("tool_calls"),
            "unparsed_call": share("unparsed_call"), "no_number": share("no_number")}  # fmt: skip


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def accuracy(folder: Path, tasks: list[dict[str, Any]], records: Path, log: Path, seed: int) -> dict[str, Any]:
    """The agent on `tasks` against `folder` served as vLLM would serve it, greedy: each episode's record."""
    from lightning_otel.testing import serve_folder  # torch: `train` needs it, the dry run does not

    records.unlink(missing_ok=True)
    with agl.quiet(log), serve_folder(folder, seed=seed) as base_url:
        llm = agl.LLM(base_url, "agl-policy", sampling_parameters={"temperature": 0.0, "max_tokens": MAX_TOKENS})
        trainer = agl.Trainer(n_runners=2, adapter={"agent_match": AGENT_MATCH}, initial_resources={"main_llm": llm})
        trainer.dev(calculator_rollout, [{**task, "record_file": str(records)} for task in tasks], gateway=True,
                    print_spans=False)  # fmt: skip
    return episode_figures(read_records(records))


def warm_start(args: argparse.Namespace, model: Path, work: Path, log: Path) -> tuple[Path, float]:
    """The warm-started policy's folder and the SFT's seconds; a folder the seed's earlier run left is reused (the
    other algorithm of the same seed starts from the same weights)."""
    warm = work / "model-warm"
    done = work / "warm_start.json"
    if done.exists() and (warm / "config.json").exists():
        print(f"warm start: reused {warm} (this seed's earlier run)", flush=True)
        return warm, json.loads(done.read_text())["sft_seconds"]
    drills = arithmetic_drills(args.drills, seed=args.seed + 500)
    with agl.quiet(log):
        sft = teacher_warm_start(model, drills, warm, seed=args.seed, epochs=args.sft_epochs,
                                 learning_rate=args.sft_learning_rate)  # fmt: skip
    seconds = sft.final["sft/train_seconds"]
    print(f"warm start: {sft.final['sft/examples']:.0f} examples from {len(drills)} drills against the scripted "
          f"teacher, SFT in {seconds:.0f}s", flush=True)  # fmt: skip
    done.write_text(json.dumps({"drills": len(drills), "examples": sft.final["sft/examples"], "sft_seconds": seconds}))
    return warm, seconds


def algorithm_of(args: argparse.Namespace, warm: Path, options: agl.TrainingOptions, work: Path) -> Any:
    """GRPO on the local Tinker engine, or online DPO with LoRA adapters of the same rank: the run's algorithm."""
    if args.algorithm == "grpo":
        engine = agl.LocalEngine(warm, rank=32, seed=args.seed)
        return agl.Tinker(engine, options, learning_rate=args.learning_rate)
    # the local engine's LoRA (rank 32, alpha 32, every projection) but the output layer's: SmolLM2 ties it to the
    # embeddings, and DPO serves its policy merged, which would move both. A group's best and worst rollouts: every
    # pair whose rewards differ (~30 a step) cost ~450 s of training a step on 2 cores, a run of two hours
    modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    lora = {"r": 32, "lora_alpha": 32, "target_modules": modules}
    return agl.DPO(warm, work / "model-dpo", options, beta=0.1, learning_rate=args.dpo_learning_rate, epochs=2,
                   batch_size=8, lora=lora, pair_rule=agl.PairRule("best-worst"))  # fmt: skip


def arm_of(args: argparse.Namespace) -> str:
    """The run's arm, which names its files: grpo, dpo, distill (GRPO and the teacher's signal), distill-alone, or
    with a frozen teacher (`--distill-teacher`) distill-frozen and distill-frozen-alone."""
    if args.distill_context:
        frozen = "-frozen" if args.distill_teacher else ""
        return f"distill{frozen}{'-alone' if args.distill_alone else ''}"
    return args.algorithm


def distillation_of(args: argparse.Namespace, warm: Path | None = None) -> agl.Distillation | None:
    """`--distill-context` and its settings as the loop's on-policy distillation (None without a context); the
    teacher is the policy itself, or with `--distill-teacher` a frozen model (`warm`: the seed's warm start)."""
    if not args.distill_context:
        if args.distill_alone or args.teacher_check or args.distill_teacher:
            raise SystemExit("--distill-alone, --distill-teacher and --teacher-check need the teacher's "
                             "--distill-context")  # fmt: skip
        return None
    if args.algorithm != "grpo":
        raise SystemExit("self-distillation (--distill-context) trains with GRPO's local engine, not --algorithm dpo")
    if args.distill_teacher and args.teacher_check:
        raise SystemExit("--teacher-check measures the policy as its own teacher; a frozen --distill-teacher is that "
                         "teacher at the first step: run the check with self-distillation")  # fmt: skip
    teacher = (warm if args.distill_teacher == "warm" else Path(args.distill_teacher)) if args.distill_teacher else None
    return agl.Distillation(weight=args.distill_weight, context=args.distill_context, alone=args.distill_alone,
                            check=args.teacher_check, teacher=teacher)  # fmt: skip


def train_run(args: argparse.Namespace) -> dict[str, Any]:
    """One seed: the untrained model, the warm start, then GRPO (or DPO); every figure of the run (also as JSON)."""
    distillation_of(args)  # its settings refused now, before the untrained model's validation
    started = time.monotonic()
    work = Path(args.workdir).resolve() / f"seed-{args.seed}"
    work.mkdir(parents=True, exist_ok=True)
    log = work / "train.log"
    from lightning_otel.testing import model_or_tiny  # torch: `train` needs it, the dry run does not

    with agl.quiet(log):
        model = with_tools_template(model_or_tiny(args.model, work, seed=args.seed), work)  # a template for tools
    val_tasks = word_problems(args.val_problems, seed=VAL_SEED)
    train_tasks = word_problems(args.train_problems, seed=args.seed)
    print(f"{args.model} (seed {args.seed}, {arm_of(args)}): other libraries' output goes to {log}", flush=True)

    untrained_file = work / "untrained.episodes.jsonl"
    if len(read_records(untrained_file)) == len(val_tasks):  # greedy: the same episodes whichever run made them
        untrained = episode_figures(read_records(untrained_file))
    else:
        untrained = accuracy(model, val_tasks, untrained_file, log, args.seed)
    print(f"untrained, {len(val_tasks)} held-out problems, greedy: right {untrained['right']:.3f}, called the "
          f"calculator {untrained['called']:.3f}", flush=True)  # fmt: skip
    warm, sft_seconds = warm_start(args, model, work, log)
    distillation = distillation_of(args, warm)

    arm = "" if arm_of(args) == "grpo" else f"-{arm_of(args)}"
    records = {mode: work / f"{mode}{arm}.episodes.jsonl" for mode in ("train", "val")}
    for path in records.values():
        path.unlink(missing_ok=True)
    tasks = {mode: [{**task, "record_file": str(records[mode])} for task in chosen]
             for mode, chosen in (("train", train_tasks), ("val", val_tasks))}  # fmt: skip
    print(f"{args.algorithm.upper()}: {args.steps} steps of {args.batch_size} problems x {args.group_size} rollouts, "
          f"temperature 1"
          + (f", {'distilled from a frozen teacher' if args.distill_teacher else 'self-distilled'} (weight "
             f"{args.distill_weight:g}{', alone' if args.distill_alone else ''}) from {args.distill_context!r}"
             if distillation else "")
          + f"; validation on the {len(val_tasks)} held-out problems, greedy", flush=True)  # fmt: skip
    trained_started = time.monotonic()
    with agl.quiet(log) as terminal:
        distilled: list[float] = []  # each step's reverse KL to the teacher

        def progress(step: int, metrics: dict[str, float]) -> None:
            trained = metrics.get("training/samples_with_advantage", metrics.get("dpo/pairs", 0))
            unit = "samples with an advantage" if args.algorithm == "grpo" else "pairs"
            kl = metrics.get("distill/reverse_kl")
            if kl is not None:
                distilled.append(kl)
            terminal.print(f"  step {step}: reward {metrics.get('rollout/reward_mean', math.nan):.3f}, {trained:.0f} "
                           + unit + (f", reverse KL to the teacher {kl:.3f}" if kl is not None else "")
                           + f", {time.monotonic() - trained_started:.0f}s")  # fmt: skip

        options = agl.TrainingOptions(
            schedule=agl.Schedule(batch_size=args.batch_size, group_size=args.group_size, max_steps=args.steps,
                                  shuffle=True, epochs=1000, val_every=args.steps, seed=args.seed),
            sampling=agl.Sampling(temperature=1.0, max_tokens=MAX_TOKENS),
            validation_sampling=agl.Sampling(temperature=0.0, max_tokens=MAX_TOKENS),
            trackers=agl.Trackers(logger=()), on_step=progress, distillation=distillation,
        )  # fmt: skip
        algorithm = algorithm_of(args, warm, options, work)
        trainer = agl.Trainer(n_runners=2, algorithm=algorithm, adapter={"agent_match": AGENT_MATCH}, progress=False)
        result = trainer.fit(calculator_rollout, tasks["train"], tasks["val"])
    val_records, train_records = read_records(records["val"]), read_records(records["train"])
    # the validations ran one after the other: the first len(val) episodes are the start's, the last the end's; a
    # teacher check's answers, the student's then the teacher's (one sample a problem each), between them
    n, checked = len(val_tasks), 2 * len(val_tasks) if args.teacher_check else 0
    per_step = args.batch_size * args.group_size
    run = {
        "model": args.model, "seed": args.seed, "algorithm": args.algorithm, "arm": arm_of(args), "val_problems": n,
        "distill_context": args.distill_context, "distill_weight": args.distill_weight,
        "distill_alone": args.distill_alone, "distill_teacher": args.distill_teacher, "reverse_kl": distilled,
        "untrained": untrained,
        "warm": episode_figures(val_records[:n]),
        **({"teacher_check": {"student": episode_figures(val_records[n : 2 * n]),
                              "teacher": episode_figures(val_records[2 * n : 3 * n])}} if checked else {}),
        "after": episode_figures(val_records[-n:]),
        **result.figures(),
        "pairs": sum(r.metrics.get("dpo/pairs", 0) for r in result.steps),
        "train_first": episode_figures(train_records[: 5 * per_step]),
        "train_last": episode_figures(train_records[-5 * per_step:]),
        "sft_seconds": sft_seconds, "train_seconds": time.monotonic() - trained_started,
        "seconds": time.monotonic() - started,
    }  # fmt: skip
    run["complete"] = len(val_records) == 2 * n + checked and all(v["rollouts"] for v in run["validations"])
    (work / f"run{arm}.json").write_text(json.dumps(run, indent=1))
    return run


def standard_error(success: float, count: int) -> float:
    return math.sqrt(success * (1 - success) / count) if count else math.nan


def quick_sizes(args: argparse.Namespace) -> None:
    """The quick mode's sizes: the tiny model, 4 drills, one step of 2 problems x 2 rollouts, 2 held-out problems."""
    args.model, args.drills, args.steps, args.val_problems, args.batch_size, args.group_size = "tiny", 4, 1, 2, 2, 2


def train(args: argparse.Namespace) -> int:
    if args.quick:
        quick_sizes(args)
    try:
        run = train_run(args)
    except agl.NothingTrained as nothing:  # every group tied at every step: said, and a failed run
        print(f"trained nothing: {nothing}", file=sys.stderr)
        return 0 if args.quick else 1
    n = run["val_problems"]
    print(f"\nheld-out accuracy ({n} problems, greedy):")
    for label, key in (
        ("untrained", "untrained"),
        ("after the warm start", "warm"),
        (f"after {arm_of(args).upper()}", "after"),
    ):
        figures = run[key]
        right, called, unparsed = figures["right"], figures["called"], figures["unparsed_call"]
        print(f"  {label:<21} {right:.3f} +- {standard_error(right, n):.3f}  (called the calculator {called:.2f}, "
              f"a call left in the text {unparsed:.2f})")  # fmt: skip
    if "teacher_check" in run:
        student, teacher = run["teacher_check"]["student"]["right"], run["teacher_check"]["teacher"]["right"]
        print(f"teacher check ({n} problems sampled): student {student:.3f}, teacher {teacher:.3f}")
    print(f"{arm_of(args).upper()} trained {run['trained_steps']} of {len(run['train_reward'])} steps "
          f"({run['zero_variance_groups']:.0f} of {run['groups']:.0f} groups with equal rewards); "
          f"{run['seconds']:.0f}s in all; {Path(args.workdir) / f'seed-{args.seed}'}")  # fmt: skip
    if not run["complete"]:
        print("not a measurement: a validation episode left no record", file=sys.stderr)
        return 1
    return 0


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["dryrun", "train"])
    parser.add_argument("--n-tasks", type=int, default=4, help="dryrun: problems")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-v", "--verbose", action="store_true", help="dryrun: print every span")
    parser.add_argument("--model", default="smollm2", help="train: a model name (smollm2, tiny) or folder")
    parser.add_argument("--workdir", default=str(HERE / "runs"), help="train: each seed's folder goes here")
    parser.add_argument("--drills", type=int, default=16, help="train: warm-start drills against the teacher")
    parser.add_argument("--sft-epochs", type=float, default=2.0)
    parser.add_argument("--sft-learning-rate", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=16, help="train: GRPO steps")
    parser.add_argument("--batch-size", type=int, default=4, help="train: problems a step")
    parser.add_argument("--group-size", type=int, default=8, help="train: rollouts a problem (GRPO's group)")
    parser.add_argument("--train-problems", type=int, default=256)
    parser.add_argument("--val-problems", type=int, default=48)
    parser.add_argument("--learning-rate", type=float, default=1.3e-3, help="train: GRPO's (LoRA rank 32)")
    parser.add_argument(
        "--algorithm",
        choices=("grpo", "dpo"),
        default="grpo",
        help="train: GRPO (the local Tinker engine) or online DPO (TRL), LoRA rank 32 both",
    )
    parser.add_argument("--dpo-learning-rate", type=float, default=2e-4, help="train: DPO's (LoRA rank 32)")
    parser.add_argument("--distill-context", default="", metavar="TEMPLATE",
                        help="train: on-policy self-distillation from the policy shown this context, a problem's "
                             "fields filled in ({question}, {expression}, {answer})")  # fmt: skip
    parser.add_argument("--distill-weight", type=float, default=1.0, help="train: the teacher's signal's weight")
    parser.add_argument("--distill-alone", action="store_true", help="train: the teacher's signal without GRPO's")
    parser.add_argument("--distill-teacher", default="", metavar="FOLDER",
                        help="train: a frozen teacher with the --distill-context: 'warm' (the seed's warm-started "
                             "model) or a model folder; default: the policy itself (self-distillation)")  # fmt: skip
    parser.add_argument("--teacher-check", action="store_true",
                        help="train: first, the held-out problems sampled as the student and as the teacher; "
                             "the run stops unless the teacher is right more often")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="train: the tiny model, a few problems (the tests)")
    return parser


def main() -> int:
    args = parser().parse_args()
    return dryrun(args) if args.mode == "dryrun" else train(args)


if __name__ == "__main__":
    sys.exit(main())
