"""Asynchronous training (`max_staleness` 1 and 2) against synchronous steps, at equal trained samples, on a CPU
task with the long-tailed latencies real agents have.

    python -m benchmarks.async_training                    # seeds 0 1 2 x {sync, k=1, k=2}, 16 steps each
    python -m benchmarks.async_training --seeds 0 --steps 8 --out runs/async.json
    python -m benchmarks.async_training --quick            # tiny sizes: that it runs (the tests run it)

The task (fixed before the first run; only the learning rate changed after it, see below): "Door k: left or right?",
one token of reply; the tiny policy cannot read, so the reply's first letter picks the door (a-m: left, about 40%
for the untrained policy); reward 1 when it is the task's door (left for every task: a bias the policy can learn in
a few steps). After its call the agent does its own work, a tool taking a lognormal time (median 0.5 s, sigma 1:
most calls are short, a few take 5-10 s), a fresh draw for every rollout. Each mode trains the same tiny Qwen2
(built offline, seed = the run's seed) with the local Tinker engine (LoRA rank 32, importance_sampling, lr 4e-3: at
1e-2, the first run's, the reward saturated within 16 steps and steps with every group's rewards equal were
skipped), 8 tasks x 8 rollouts a step, the same number of steps, 2 runner processes of 64 concurrent rollouts each:
equal trained samples. Reported per run: wall time of the steps, rollouts per second, the runners' idle share, the
staleness of the trained samples, groups dropped as stale, and the reward against samples (the training reward of
each quarter of the run, and the sampled policy's success on 8 tasks x 16 rollouts before and after training).
Ratios are against the synchronous run of the same seed.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lightning_otel as agl
from benchmarks._seeded_runs import every_arm, finish, standard_error
from benchmarks._two_choices import choice_of

MODES = {"sync": 0, "k=1": 1, "k=2": 2}
_draws = threading.local()


@agl.rollout
def door_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """One call, then the tool's lognormal time; 1.0 for the task's door."""
    from openai import OpenAI

    client = getattr(_draws, "client", None)
    if client is None or client.base_url != llm.endpoint:
        _draws.client = client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=5)
    reply = client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": f"Door {task['door']}: left or right?"}], max_tokens=1
    )
    if task.get("tool_median_s"):
        draw = random.Random(f"{task['seed']}/{time.monotonic_ns()}/{threading.get_ident()}")
        time.sleep(min(draw.lognormvariate(math.log(task["tool_median_s"]), task["tool_sigma"]), 30.0))
    return 1.0 if choice_of(reply.choices[0].message.content or "") == "left" else 0.0


def door_tasks(count: int, seed: int, median_s: float, sigma: float) -> list[dict[str, Any]]:
    return [{"task_id": f"door-{k}", "door": k, "seed": seed, "tool_median_s": median_s, "tool_sigma": sigma}
            for k in range(count)]  # fmt: skip


def one_run(mode: str, seed: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from lightning_otel.testing import model_or_tiny

    model = model_or_tiny("tiny", workdir, seed=seed)  # the tiny random policy (its task needs no reading)
    tasks = door_tasks(args.tasks, seed, args.tool_median_s, args.tool_sigma)
    val_tasks = door_tasks(args.tasks, seed, 0.0, 0.0)  # validation measures the policy, not the tool
    options = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=len(tasks), group_size=args.group_size, max_steps=args.steps,
                              val_every=args.steps, val_group_size=args.val_group_size, seed=seed),
        sampling=agl.Sampling(max_tokens=1), validation_sampling=agl.Sampling(max_tokens=1),
        trackers=agl.Trackers(logger=()), max_staleness=MODES[mode],
    )  # fmt: skip
    algorithm = agl.Tinker(agl.LocalEngine(model, rank=32, seed=seed), options, learning_rate=args.learning_rate,
                           tis_cap=args.tis_cap if MODES[mode] else None)  # fmt: skip
    trainer = agl.Trainer(
        n_runners=2,
        algorithm=algorithm,
        progress=False,
        runner_options=agl.RunnerOptions(max_concurrency=64),
    )
    with agl.quiet(workdir / f"{mode}-{seed}.log"):
        result = trainer.fit(door_agent, tasks, val_tasks)
    steps = result.steps
    wall = sum(record.metrics["timing_s/step"] for record in steps)
    rewards = [record.metrics.get("rollout/reward_mean", math.nan) for record in steps]
    quarter = max(1, len(rewards) // 4)
    samples = [record.metrics["training/samples"] for record in steps]
    return {
        "mode": mode,
        "tis_cap": args.tis_cap if MODES[mode] else None,
        "seed": seed,
        "steps": len(steps),
        "trained_steps": sum(1 for record in steps if not record.skipped_because),
        "samples": sum(samples),
        "wall_s": wall,
        "rollouts_per_s": sum(record.metrics["rollout/rollouts"] for record in steps) / wall,
        "runner_idle_share": statistics.fmean(record.metrics["rollout/runner_idle_share"] for record in steps),
        "staleness_mean": statistics.fmean(record.metrics.get("async/staleness_mean", 0.0) for record in steps),
        "dropped_stale_groups": sum(record.metrics.get("async/dropped_stale_groups", 0.0) for record in steps),
        "gateway_pause_s": sum(record.metrics.get("async/gateway_pause_s", 0.0) for record in steps),
        "reward_quarters": [statistics.fmean(rewards[i : i + quarter]) for i in range(0, len(rewards), quarter)],
        "success": [
            (record.step, record.metrics["val/reward_mean"], int(record.metrics.get("val/with_samples", 0)))
            for record in result.validations
        ],
    }


def _label(run: dict[str, Any]) -> str:
    return run["mode"] + (f" tis {run['tis_cap']:g}" if run.get("tis_cap") else "")


def summary(runs: list[dict[str, Any]], *, every_step: bool = True) -> tuple[list[str], bool]:
    """Lines to print, and whether every run was a measurement (every step trained, or with `every_step=False` some
    step did; the final validation had rollouts)."""
    lines, complete = [], True
    header = f"{'mode':<5} {'seed':>4} {'wall s':>7} {'x sync':>7} {'rollouts/s':>10} {'idle':>5} {'stale':>5} "
    lines.append(header + f"{'dropped':>7} {'pause s':>7}  {'reward by quarter':<26} success start -> end (+-SE)")
    sync = {run["seed"]: run for run in runs if run["mode"] == "sync"}
    for run in runs:
        base = sync.get(run["seed"])
        speedup = base["wall_s"] / run["wall_s"] if base else math.nan
        (_, start, _), (_, end, count) = run["success"][0], run["success"][-1]
        quarters = " ".join(f"{q:.2f}" for q in run["reward_quarters"])
        lines.append(
            f"{_label(run):<5} {run['seed']:>4} {run['wall_s']:>7.1f} {speedup:>6.2f}x {run['rollouts_per_s']:>10.1f} "
            f"{run['runner_idle_share']:>5.2f} {run['staleness_mean']:>5.2f} {run['dropped_stale_groups']:>7.0f} "
            f"{run['gateway_pause_s']:>7.2f}  {quarters:<26} {start:.3f} -> {end:.3f} "
            f"+-{standard_error(end, count):.3f}"
        )
        trained = run["trained_steps"] == run["steps"] if every_step else run["trained_steps"] > 0
        complete &= trained and count > 0
    for mode in MODES:
        of_mode = [run for run in runs if run["mode"] == mode]
        if not of_mode:
            continue
        ratios = [sync[run["seed"]]["wall_s"] / run["wall_s"] for run in of_mode if run["seed"] in sync]
        ends = [run["success"][-1] for run in of_mode]
        wins, count = sum(s * n for _, s, n in ends), sum(n for _, _, n in ends)
        speedup = (
            f"{min(ratios):.2f}-{max(ratios):.2f}x (mean {statistics.fmean(ratios):.2f}x, {len(ratios)} seeds)"
            if ratios
            else "not measured (no sync run of the same seed)"
        )
        lines.append(
            f"{_label(of_mode[0])}: speedup over sync {speedup}; final success pooled {wins / count:.3f} "
            f"+- {standard_error(wins / count, count):.3f} "
            f"({count} rollouts); samples {statistics.fmean(run['samples'] for run in of_mode):.0f} a run"
        )
    return lines, complete


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--val-group-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=4e-3)
    parser.add_argument("--tool-median-s", type=float, default=0.5)
    parser.add_argument("--tool-sigma", type=float, default=1.0)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--tis-cap", type=float, default=None, help="asynchronous modes: truncated IS at this cap")
    parser.add_argument("--out", type=Path, help="write every run's numbers here (JSON)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds: that it runs (the tests run it)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps, args.tasks, args.group_size, args.val_group_size = [0], 3, 2, 2, 2
        args.tool_median_s = 0.05
    runs = every_arm(args.seeds, args.modes, lambda mode, seed, folder: one_run(mode, seed, args, folder), "agl-async-")
    lines, complete = summary(runs, every_step=not args.quick)  # tiny groups: a step may have no reward spread
    return finish(runs, lines, complete, args.out)


if __name__ == "__main__":
    sys.exit(main())
