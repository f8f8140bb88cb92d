"""A multi-turn task nobody here designed: gymnasium's FrozenLake as text, trained on SmolLM2-135M-Instruct with
outcome-only GRPO (and, `--advantages grpo anchor`, per-call credit), at equal steps and rollouts.

    python -m benchmarks.frozen_lake --out runs/lake.json    # 3 seeds x {grpo}, SmolLM2, about 8 min a run
    python -m benchmarks.frozen_lake --advantages grpo anchor --seeds 0
    python -m benchmarks.frozen_lake --advantages refill grpo_equal   # refilled groups against dropping them
    python -m benchmarks.frozen_lake --advantages grpo distill distill_alone   # self-distillation against GRPO
    python -m benchmarks.frozen_lake --teacher-check 8       # is that teacher the better policy? (no training)
    python -m benchmarks.frozen_lake --quick                 # tiny sizes: that it runs (the tests run it)

The task (the docs' "A real model" page says why, and what the first version of it measured):
- FrozenLake-v1 from gymnasium, its default 4x4 map, not slippery (every move does what it says). Each turn the
  agent shows the policy the map with its own place marked P and asks for one move; the first of the words left,
  down, right or up in the reply is the move (`gymnasium` steps it). A reply naming none is no move: the turn is
  spent and the agent stays. 10 turns at most; a hole ends the episode. Reward 1 at the goal, else 0: nothing shaped.
- An episode starts on any square that is not a hole or the goal (11 of them; gymnasium's start S is one), one task
  each, a step's tasks drawn in turn from a shuffled order: from a square next to the goal one right word wins, so
  groups differ in reward from the first step, and what is learnt there is the end of every longer path.
- The prompt holds the map and the current place only, not the history: every visit of a square is the same state,
  so states recur within a rollout and across a group, which is what per-call credit groups on.
- Success, the figure reported: the share of validation episodes that reach the goal, `--val-group-size` from each
  of the 11 squares, on the sampled policy (temperature 1), before and after training, with its binomial standard
  error, per run and pooled over the seeds; beside it the share from S alone, and from every episode's own record
  the share of replies that named no move and the share of episodes ending in a hole.
Training: the local Tinker engine (LoRA rank 32, importance sampling; learning rate 6.5e-4 on SmolLM2, the
recipe's: half the Tinker cookbook's supervised rule for LoRA, which the docs' sweep on this task measured best; 1e-2
on the tiny model), 16
steps of `--batch-size` 4 squares x `--group-size` 4 episodes, replies of at most 8 tokens, 2 runner processes.
`anchor` uses GiGPO's settings where the task leaves a choice (step weight 1, discount 0.9), as the credit benchmark.
`refill`: GRPO whose tied groups are made up for by further squares' groups in the same step
(`--refill-tied-groups`, at most `--refill-factor` x the step's squares more); `grpo_equal`: GRPO that drops them,
given as many steps as the same seed's `refill` run took rollouts (run it after `refill`): the two at equal rollouts.
`distill`: GRPO plus on-policy self-distillation (`agl.Distillation`): the policy, with a shortest safe path from the
episode's start square in its context (which the student never sees), scores every token the student sampled, and
that per-token signal is added to the GRPO advantage, times `--distill-weight`; `distill_alone`: the teacher's signal
without the reward's. Both at `grpo`'s steps and rollouts.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning_otel as agl
from benchmarks._lake_teacher import first_turn_replies, teacher_check_lines
from benchmarks._seeded_runs import estimator_of, every_arm, finish, pooled_comparison, standard_error
from benchmarks._two_choices import MODELS, chat_client
from lightning_otel import semconv
from lightning_otel.runtime.output import terminal
from lightning_otel.testing.tiny_model import model_or_tiny

MOVES = ("left", "down", "right", "up")  # gymnasium's action numbers, in order
TURNS = 10
MOVE_WORD = re.compile(r"\b(left|down|right|up)\b", re.IGNORECASE)


def move_of(reply: str) -> int | None:
    """The first move the reply names (gymnasium's action number), or None."""
    found = MOVE_WORD.search(reply)
    return MOVES.index(found.group(1).lower()) if found else None


RULES = (
    "You are playing FrozenLake. Walk on the frozen lake (F) from the start (S) to the goal (G) without falling "
    "into a hole (H). P marks where you are."
)


def board(rows: list[str], place: int) -> str:
    """The question: the map with the agent's square marked P (the rules go in the system message)."""
    width = len(rows[0])
    marked = [list(row) for row in rows]
    marked[place // width][place % width] = "P"
    grid = "\n".join(" ".join(row) for row in marked)
    return f"{grid}\nWhich way do you move? Answer with one word: left, down, right or up."


def shortest_path(rows: list[str], start: int) -> list[str]:
    """The moves of a shortest path from `start` to the goal that steps in no hole (breadth first, gymnasium's
    moves and numbering): the privileged context of the self-distillation arms' teacher."""
    width, cells = len(rows[0]), "".join(rows)
    offsets = {"left": (0, -1), "down": (1, 0), "right": (0, 1), "up": (-1, 0)}
    paths, frontier = {start: []}, [start]
    while frontier:
        square = frontier.pop(0)
        if cells[square] == "G":
            return paths[square]
        for move in MOVES:
            row, col = square // width + offsets[move][0], square % width + offsets[move][1]
            following = row * width + col
            if 0 <= row < len(rows) and 0 <= col < width and cells[following] != "H" and following not in paths:
                paths[following] = [*paths[square], move]
                frontier.append(following)
    raise ValueError(f"no safe path from square {start}")


def start_squares() -> list[int]:
    """Every square an episode may start on: not a hole, not the goal (gymnasium's numbering, row by row)."""
    return [square for square, cell in enumerate("".join(lake_rows())) if cell in "SF"]


def lake_rows() -> list[str]:
    """gymnasium's default 4x4 map, a row a string."""
    import gymnasium

    return [bytes(row).decode() for row in gymnasium.make("FrozenLake-v1").unwrapped.desc]


@agl.rollout
def lake_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Up to TURNS calls, one move each, on gymnasium's FrozenLake from the task's square: 1.0 at the goal."""
    import gymnasium

    client = chat_client(llm.endpoint, llm.api_key or "unused")
    env = gymnasium.make("FrozenLake-v1", is_slippery=False)
    env.reset(seed=0)
    env.unwrapped.s = place = task["start"]  # the environment's own state: where the next step moves from
    rows = [bytes(row).decode() for row in env.unwrapped.desc]
    record = {"task": task["task_id"], "start": place, "replies": 0, "no_move": 0, "end": "out of turns"}
    for _ in range(TURNS):
        messages = [{"role": "system", "content": RULES}, {"role": "user", "content": board(rows, place)}]
        reply = client.chat.completions.create(model=llm.model, messages=messages)
        record["replies"] += 1
        record["version"] = (reply.model_extra or {}).get(semconv.POLICY_VERSION_FIELD)  # which weights sampled it
        move = move_of(reply.choices[0].message.content or "")
        if move is None:
            record["no_move"] += 1
            continue
        place, reward, ended, _, _ = env.step(move)
        if ended:
            record["end"] = "goal" if reward > 0 else "hole"
            break
    record["mode"] = task["mode"]
    with open(task["record_file"], "a") as out:  # one short line per episode: appends from two runners stay whole
        out.write(json.dumps(record) + "\n")
    return float(record["end"] == "goal")


def episode_figures(records: list[dict[str, Any]]) -> dict[str, float]:
    replies = sum(record["replies"] for record in records)
    share = (lambda count: count / len(records)) if records else (lambda count: float("nan"))
    return {
        "episodes": len(records),
        "goal_share": share(sum(record["end"] == "goal" for record in records)),
        "from_start_goal_share": statistics.fmean(record["end"] == "goal" for record in records if record["start"] == 0)
        if any(record["start"] == 0 for record in records)
        else float("nan"),
        "no_move_share": sum(record["no_move"] for record in records) / replies if replies else float("nan"),
        "hole_share": share(sum(record["end"] == "hole" for record in records)),
    }


REFILL_ARMS = ("refill", "grpo_equal")
# GRPO with on-policy self-distillation (`distill`), and the teacher's signal alone (`distill_alone`): the policy is
# its own teacher with a shortest safe path from the episode's start square in its context, which the student never
# sees; the same steps and rollouts as `grpo` (the teacher scores the sampled tokens, it samples none)
DISTILL_ARMS = ("distill", "distill_alone")
DISTILL_KEYS = ("reverse_kl", "teacher_logprob")
TEACHER_CONTEXT = "A safe shortest path from the square this episode started on to the goal: {path}."
ROLLOUTS_OF_REFILL: dict[int, int] = {}  # seed -> the refill run's training rollouts (grpo_equal's budget)


def steps_of(advantage: str, seed: int, args: argparse.Namespace) -> int:
    """The run's steps: `--steps`; for grpo_equal those whose rollouts come nearest to the same seed's refill run's.
    An epoch's last step holds the squares left over (11 squares, 4 a step: 4, 4, 3), as the schedule draws them."""
    if advantage != "grpo_equal":
        return args.steps
    if seed not in ROLLOUTS_OF_REFILL:
        raise SystemExit("grpo_equal takes its steps from the same seed's refill run: list refill before it")
    full, left = divmod(len(args.squares or start_squares()), args.batch_size)
    per_epoch = [args.batch_size] * full + [left] * (left > 0)
    target, steps, rollouts = ROLLOUTS_OF_REFILL[seed], 0, 0
    while True:
        more = rollouts + per_epoch[steps % len(per_epoch)] * args.group_size
        if steps and abs(more - target) >= abs(rollouts - target):
            return steps
        steps, rollouts = steps + 1, more


def step_line(arm: str, seed: int, steps: int, step: int, metrics: dict[str, float], seen: list[dict]) -> None:
    """Keep the step's metrics, and say on the terminal that it ended: a SmolLM2 run takes most of an hour, and
    `agl.quiet` sends everything but our own lines to the run's log."""
    seen.append(metrics)
    trained = "no update (every group tied)" if metrics.get("training/skipped_step") else "trained"
    teacher = (
        f", reverse KL to the teacher {metrics['distill/reverse_kl']:.3f}" if "distill/reverse_kl" in metrics else ""
    )
    terminal().print(f"{arm} seed {seed}: step {step} of {steps}, training reward "
                     f"{metrics.get('rollout/reward_mean', 0.0):.3f}, {trained}{teacher}, "
                     f"{metrics.get('timing_s/step', 0.0):.0f} s")  # fmt: skip


def one_run(advantage: str, seed: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    model = model_or_tiny(args.model, workdir, seed=seed)
    steps = steps_of(advantage, seed, args)
    seen: list[dict] = []  # each step's metrics, as the steps end (kept when no step trained too)
    records = (args.records or workdir) / f"{advantage}-{seed}.episodes.jsonl"
    records.parent.mkdir(parents=True, exist_ok=True)
    records.unlink(missing_ok=True)
    squares = args.squares or start_squares()
    rows = lake_rows()
    tasks = {mode: [{"task_id": f"square-{square}", "start": square, "mode": mode, "record_file": str(records),
                     "path": ", ".join(shortest_path(rows, square))} for square in squares]
             for mode in ("train", "val")}  # fmt: skip
    distillation = (agl.Distillation(context=TEACHER_CONTEXT, alone=advantage == "distill_alone",
                                     weight=args.distill_weight) if advantage in DISTILL_ARMS else None)  # fmt: skip
    options = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=args.batch_size, group_size=args.group_size, max_steps=steps,
                              shuffle=True, epochs=1000, val_every=steps, val_group_size=args.val_group_size,
                              seed=seed),
        sampling=agl.Sampling(max_tokens=8), validation_sampling=agl.Sampling(max_tokens=8),
        advantage=estimator_of("grpo" if advantage in (*REFILL_ARMS, *DISTILL_ARMS) else advantage),
        trackers=agl.Trackers(logger=()), refill_tied_groups=args.refill_factor if advantage == "refill" else 0.0,
        distillation=distillation,
        on_step=lambda step, metrics: step_line(advantage, seed, steps, step, metrics, seen),
    )  # fmt: skip
    algorithm = agl.Tinker(agl.LocalEngine(model, rank=32, seed=seed), options, learning_rate=args.learning_rate)
    trainer = agl.Trainer(n_runners=2, algorithm=algorithm, progress=False)
    started = time.monotonic()
    try:
        with agl.quiet(workdir / f"{advantage}-{seed}.log"):
            result = trainer.fit(lake_agent, tasks["train"], tasks["val"])
    except agl.NothingTrained as error:  # every step's groups were all equal: a run, reported, not a crash
        result, nothing = None, str(error)
    rollouts = int(sum(metrics.get("rollout/rollouts", 0.0) for metrics in seen))
    if advantage == "refill":
        ROLLOUTS_OF_REFILL[seed] = rollouts
    if result is None:
        return {"advantage": advantage, "seed": seed, "model": args.model, "nothing_trained": nothing,
                "train_rollouts": rollouts, "steps": steps, "seconds": time.monotonic() - started}  # fmt: skip
    episodes = [json.loads(line) for line in records.read_text().splitlines()]
    val_episodes = [record for record in episodes if record["mode"] == "val"]
    train_episodes = [record for record in episodes if record["mode"] == "train"]
    last = max(record["version"] for record in val_episodes)  # the end's validation: the last weights
    per_step = args.batch_size * args.group_size
    refilled = {key: sum(record.metrics.get(f"refill/{key}", 0) for record in result.steps)
                for key in ("tasks_drawn", "groups", "tied_groups", "informative_groups")}  # fmt: skip
    return {"advantage": advantage, "seed": seed, "model": args.model, **result.figures(), "train_rollouts": rollouts,
            "steps": steps, "refill": refilled, "distill_weight": args.distill_weight if distillation else None,
            # per step: the sampled tokens' reverse KL to the teacher, and the teacher's mean logprob of them
            "distill": {key: [metrics.get(f"distill/{key}") for metrics in seen] for key in DISTILL_KEYS}
            if distillation else None,
            "val_start": episode_figures([record for record in val_episodes if record["version"] == 0]),
            "val_end": episode_figures([record for record in val_episodes if record["version"] == last]),
            "train_first": episode_figures(train_episodes[: 5 * per_step]),
            "train_last": episode_figures(train_episodes[-5 * per_step:]),
            "seconds": time.monotonic() - started}  # fmt: skip


def summary(runs: list[dict[str, Any]], arms: list[str], *, ties_allowed: bool) -> tuple[list[str], bool]:
    """Lines to print, and whether every run was a measurement (a step trained, validations complete;
    `ties_allowed`: the quick mode's few episodes may tie in every group, and that run still ran)."""
    lines, complete = [], True
    lines.append(f"{'advantage':<9} {'seed':>4} {'success start':>14} {'end (+-SE)':>16} {'from S':>12} "
                 f"{'no move':>13} {'hole':>12} {'trained':>8} {'equal groups':>12} {'s':>6}")  # fmt: skip
    for run in runs:
        if "nothing_trained" in run:
            lines.append(f"{run['advantage']:<9} {run['seed']:>4} trained nothing: {run['nothing_trained'][:300]}")
            complete &= ties_allowed
            continue
        first, last = run["validations"][0], run["validations"][-1]
        lines.append(
            f"{run['advantage']:<9} {run['seed']:>4} {first['success']:>14.3f} {last['success']:>8.3f} "
            f"+-{standard_error(last['success'], last['rollouts']):.3f} "
            f"{run['val_start']['from_start_goal_share']:>5.2f} -> {run['val_end']['from_start_goal_share']:.2f} "
            f"{run['val_start']['no_move_share']:>5.2f} -> {run['val_end']['no_move_share']:.2f} "
            f"{run['val_start']['hole_share']:>4.2f} -> {run['val_end']['hole_share']:.2f} "
            f"{run['trained_steps']:>4}/{len(run['train_reward']):<3} "
            f"{run['zero_variance_groups']:>5.0f}/{run['groups']:<6} {run['seconds']:>6.0f}"
        )
        complete &= run["trained_steps"] > 0 and all(v["rollouts"] for v in run["validations"])
        complete &= run["val_end"]["episodes"] == last["rollouts"]
    for arm in arms:  # success before against after, pooled over the arm's seeds
        ends = [run for run in runs if run["advantage"] == arm and "nothing_trained" not in run]
        before = [{"phase": "before", **run, "validations": run["validations"][:1]} for run in ends]
        after = [{"phase": "after", **run} for run in ends]
        lines += [f"{arm}: {line}" for line in pooled_comparison(before + after, "phase", "before", "after")]
    measured = [run for run in runs if "nothing_trained" not in run]
    for candidate in ("anchor", *DISTILL_ARMS):
        if {"grpo", candidate} <= set(arms):
            lines += pooled_comparison(measured, "advantage", "grpo", candidate, either_way=True)
    if set(REFILL_ARMS) <= set(arms):
        for run in runs:
            if run["advantage"] in REFILL_ARMS:
                lines.append(f"{run['advantage']} seed {run['seed']}: {run['steps']} steps, {run['train_rollouts']} "
                             f"training rollouts, refill {json.dumps(run.get('refill'))}")  # fmt: skip
        lines += pooled_comparison(measured, "advantage", "grpo_equal", "refill")
    return lines, complete


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=4, help="start squares a step")
    parser.add_argument("--group-size", type=int, default=4, help="episodes from each")
    parser.add_argument("--val-group-size", type=int, default=4, help="validation episodes from each square")
    parser.add_argument("--squares", type=int, nargs="+", help="start squares (default: all 11)")
    parser.add_argument("--records", type=Path, help="keep every episode's record here (ARM-SEED.episodes.jsonl)")
    parser.add_argument("--model", choices=MODELS, default="smollm2")
    parser.add_argument("--learning-rate", type=float,
                        help="default: 6.5e-4 on SmolLM2 (its recipe), 1e-2 on the tiny model")  # fmt: skip
    parser.add_argument(
        "--advantages",
        nargs="+",
        default=["grpo"],
        choices=["grpo", "anchor", *REFILL_ARMS, *DISTILL_ARMS],
        help="arms, run in this order for each seed (grpo_equal after refill)",
    )
    parser.add_argument("--refill-factor", type=float, default=2.0, help="refill: at most this x the step's squares")
    parser.add_argument("--distill-weight", type=float, default=1.0,
                        help="distill arms: the teacher's per-token signal's weight (agl.Distillation)")  # fmt: skip
    parser.add_argument("--teacher-check", type=int, metavar="N", default=0,
                        help="only: N replies a square, with and without the distill teacher's context")  # fmt: skip
    parser.add_argument("--out", type=Path, help="write every run's numbers here (JSON)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a minute: that it runs (the tests)")
    args = parser.parse_args()
    if args.quick:
        # the tiny model (four arms of SmolLM2 took 8 minutes on 2 cores), the squares nearest the goal; a group
        # may tie in every group of the step (the run says "trained nothing"), which the quick mode allows
        args.model, args.seeds, args.steps = "tiny", [0], 1
        args.batch_size, args.group_size, args.val_group_size = 2, 4, 1
        args.squares = [14, 13, 10]  # a third: refill has a square beyond the step's to draw
        args.advantages, args.teacher_check = ["grpo", "anchor", "refill", "grpo_equal", "distill"], 1
    if args.learning_rate is None:
        args.learning_rate = 6.5e-4 if args.model == "smollm2" else 1e-2
    if args.teacher_check:  # is the teacher the better policy? (docs/models.md: on SmolLM2 it was not)
        with tempfile.TemporaryDirectory(prefix="agl-lake-teacher-") as folder:
            model = model_or_tiny(args.model, folder, seed=args.seeds[0])
            shares = first_turn_replies(model, args.squares or start_squares(), args.teacher_check, args.seeds[0],
                                        context=TEACHER_CONTEXT)  # fmt: skip
        print("\n".join(teacher_check_lines(shares)), flush=True)
        if not args.quick:  # the check alone; the quick mode runs the arms too
            return 0
    runs = every_arm(
        args.seeds, args.advantages, lambda arm, seed, folder: one_run(arm, seed, args, folder), "agl-lake-"
    )
    lines, complete = summary(runs, args.advantages, ties_allowed=args.quick)
    return finish(runs, lines, complete, args.out)


if __name__ == "__main__":
    sys.exit(main())
