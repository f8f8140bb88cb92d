"""Per-call credit (`advantage="anchor"`) against outcome-only GRPO, at equal steps and rollouts, on a task designed
for the question: the locked-doors maze.

    python -m benchmarks.credit_assignment                  # 3 seeds x {grpo, anchor}, 30 steps each
    python -m benchmarks.credit_assignment --model smollm2  # the same on SmolLM2-135M-Instruct (lr 2e-4)
    python -m benchmarks.credit_assignment --seeds 0 --steps 10 --out runs/credit.json
    python -m benchmarks.credit_assignment --quick          # tiny sizes: that it runs (the tests run it)

The task (fixed before any tuning; the docs' credit page says why it was chosen):
- 8 mazes, each a row of 3 rooms. In every room one of two doors (left or right, drawn once per maze and room from
  the maze's number) opens onto the next room; the other is locked and the agent stays where it is.
- Each turn the agent asks the policy afresh, "Maze m, room r of 3: left or right?", one token of reply. The tiny
  policy cannot read, so the environment maps its reply to a door: a first letter from a to m opens the left door,
  anything else the right one (about 40% / 60% for the untrained policy).
- 5 turns: reward 1 when the agent is through the third room in time, else 0. A wrong door costs a turn and can be
  recovered later, so a winning rollout often holds wrong calls, and the final reward alone cannot tell which.
- The states recur: every rollout of a maze starts in its room 1 and most visit room 2, so anchor groups (same maze,
  same new input) are large; a wrong door repeats the same state within a rollout too.
Both estimators train the same model (the tiny Qwen2 built offline with seed = the run's seed, or SmolLM2, read the
same way) with the local Tinker engine (LoRA rank 32, importance_sampling, learning rate 1e-2 on the tiny model and
2e-4 on SmolLM2, as the policy-per-agent benchmark, temperature 1), 8 mazes x 8 rollouts a step, 2 runner
processes; `anchor` uses GiGPO's settings where this task leaves a choice: step weight 1, discount 0.9 (a door
opened sooner is worth more), the cookbook's mean-only baselines. Success is measured on the sampled policy
(temperature 1, 16 rollouts per maze = 128) before training, at the middle and at the end; reported with its
binomial standard error, per run and pooled over the seeds.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import lightning_otel as agl
from benchmarks._seeded_runs import (
    SUCCESS_HEADER,
    estimator_of,
    every_arm,
    finish,
    is_measurement,
    pooled_comparison,
    success_cells,
)
from benchmarks._two_choices import MODELS, chat_client, choice_of
from lightning_otel.testing.tiny_model import model_or_tiny

MAZES, ROOMS, TURNS = 8, 3, 5


def doors(maze: int) -> list[str]:
    """The door that opens in each room of a maze (fixed by its number)."""
    draw = random.Random(1000 + maze)
    return [draw.choice(("left", "right")) for _ in range(ROOMS)]


@agl.rollout
def maze_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Up to TURNS calls, one door each; 1.0 when through every room in time."""
    client = chat_client(llm.endpoint, llm.api_key or "unused")
    room, code = 0, task["doors"]
    for _ in range(TURNS):
        prompt = f"Maze {task['maze']}, room {room + 1} of {ROOMS}: left or right?"
        reply = client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": prompt}], max_tokens=1
        )
        if choice_of(reply.choices[0].message.content or "") == code[room]:
            room += 1
            if room == ROOMS:
                return 1.0
    return 0.0


def maze_tasks(count: int) -> list[dict[str, Any]]:
    return [{"task_id": f"maze-{maze}", "maze": maze, "doors": doors(maze)} for maze in range(count)]


def one_run(advantage: str, seed: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    model = model_or_tiny(args.model, workdir, seed=seed)
    tasks = maze_tasks(args.mazes)
    options = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=len(tasks), group_size=args.group_size, max_steps=args.steps,
                              val_every=max(1, args.steps // 2), val_group_size=args.val_group_size, seed=seed),
        sampling=agl.Sampling(max_tokens=1), validation_sampling=agl.Sampling(max_tokens=1),
        advantage=estimator_of(advantage), trackers=agl.Trackers(logger=()),
    )  # fmt: skip
    algorithm = agl.Tinker(agl.LocalEngine(model, rank=32, seed=seed), options, learning_rate=args.learning_rate)
    trainer = agl.Trainer(n_runners=2, algorithm=algorithm, progress=False)
    started = time.monotonic()
    with agl.quiet(workdir / f"{advantage}-{seed}.log"):
        result = trainer.fit(maze_agent, tasks, tasks)
    coverage = statistics.fmean(record.metrics.get("credit/anchor_coverage", math.nan) for record in result.steps)
    return {"advantage": advantage, "seed": seed, "model": args.model, **result.figures(),
            "anchor_coverage": coverage,
            "seconds": time.monotonic() - started}  # fmt: skip


def summary(runs: list[dict[str, Any]]) -> tuple[list[str], bool]:
    """Lines to print, and whether every run was a measurement (each step trained, validations complete)."""
    lines, complete = [], True
    lines.append(f"{'advantage':<9} {'seed':>4} {SUCCESS_HEADER} {'coverage':>8} {'s':>6}")
    for run in runs:
        lines.append(f"{run['advantage']:<9} {run['seed']:>4} {success_cells(run)} {run['anchor_coverage']:>8.2f} "
                     f"{run['seconds']:>6.0f}")  # fmt: skip
        complete &= is_measurement(run)
    lines += pooled_comparison(runs, "advantage", "grpo", "anchor")
    return lines, complete


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--mazes", type=int, default=MAZES)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--val-group-size", type=int, default=16)
    parser.add_argument("--model", choices=MODELS, default="tiny")
    parser.add_argument("--learning-rate", type=float, help="default: 1e-2 on the tiny model, 2e-4 on SmolLM2")
    parser.add_argument("--advantages", nargs="+", default=["grpo", "anchor"], choices=["grpo", "anchor"])
    parser.add_argument("--out", type=Path, help="write every run's numbers here (JSON)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds: that it runs (the tests run it)")
    args = parser.parse_args()
    if args.learning_rate is None:
        args.learning_rate = 2e-4 if args.model == "smollm2" else 1e-2
    if args.quick:
        args.seeds, args.steps, args.mazes, args.group_size, args.val_group_size = [0], 2, 2, 4, 2
    runs = every_arm(
        args.seeds, args.advantages, lambda arm, seed, folder: one_run(arm, seed, args, folder), "agl-credit-"
    )
    lines, complete = summary(runs)
    return finish(runs, lines, complete, args.out)


if __name__ == "__main__":
    sys.exit(main())
