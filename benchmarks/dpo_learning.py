"""Online DPO on the demo's task, on CPU: does the policy's reward rise beyond noise from pairs of its own rollouts?

    python -m benchmarks.dpo_learning                    # 3 seeds x 30 steps, ~2 min a seed on 2 cores
    python -m benchmarks.dpo_learning --quick            # tiny sizes: that it runs (the tests run it)

The task is `lightning-otel demo`'s: `write` answers a word "in CAPITAL LETTERS", `check` comments; the reward is the
capital-letter share of the writer's answer; `agent_match="write"`. The policy is the demo's tiny random Qwen2
(built offline, the same for every seed). Each step: 4 tasks x 4 rollouts (12 tokens at temperature 1), pairs by
`PairRule("best-worst")` per group, two DPO passes at learning rate 1e-2 (full fine-tuning, beta 0.1, the frozen
start as reference). A step whose groups all scored alike (a solved task) has no pair and is skipped. The
seed sets sampling, TRL's seed and the task order. Measured: the sampled policy's reward on all 20 words x 4
rollouts (temperature 1) before the first step and after the last, the difference and its standard error
(independent samples of 80 rollouts each), per seed and pooled; and the training reward by quarter.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import lightning_otel as agl
from benchmarks._seeded_runs import every_arm, finish
from lightning_otel.cli.train_demo import TASKS, shout_rollout


def _mean_se(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (values[0] if values else math.nan), math.nan
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def one_run(arm: str, seed: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from lightning_otel.testing import save_tiny_model

    model = workdir / "model"
    if not (model / "config.json").exists():
        save_tiny_model(model)  # the demo's policy
    tasks = TASKS[: args.tasks]
    options = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=args.batch, group_size=args.group_size, max_steps=args.steps,
                              val_every=args.steps, val_group_size=args.val_group_size, shuffle=True, seed=seed),
        sampling=agl.Sampling(max_tokens=12), validation_sampling=agl.Sampling(max_tokens=12),
        trackers=agl.Trackers(logger=()),
    )  # fmt: skip
    algorithm = agl.DPO(
        model, workdir / f"out-{seed}", options, beta=args.beta, learning_rate=args.learning_rate,
        epochs=args.epochs, batch_size=8, pair_rule=agl.PairRule(args.pairs),
    )  # fmt: skip
    trainer = agl.Trainer(n_runners=2, algorithm=algorithm, adapter={"agent_match": "write"}, progress=False)
    with agl.quiet(workdir / f"{arm}-{seed}.log"):
        result = trainer.fit(shout_rollout, tasks, tasks)
    loop = result
    assert loop is not None
    rewards = loop.rewards()
    quarter = max(1, math.ceil(len(rewards) / 4))
    (start_mean, start_se), (end_mean, end_se) = (_mean_se(list(v.rewards.values())) for v in
                                                  (loop.validations[0], loop.validations[-1]))  # fmt: skip
    return {
        "arm": arm, "seed": seed, "steps": len(loop.steps),
        "trained_steps": sum(1 for record in loop.steps if not record.skipped_because),
        "pairs": int(result.final["dpo/total_pairs"]),
        "wall_s": sum(record.metrics.get("timing_s/step", 0.0) for record in loop.steps),
        "reward_quarters": [statistics.fmean(rewards[i : i + quarter]) for i in range(0, len(rewards), quarter)],
        "val_start": start_mean, "val_start_se": start_se, "val_end": end_mean, "val_end_se": end_se,
        "val_rollouts": len(loop.validations[-1].rewards),
        "dpo_accuracy_last": loop.steps[-1].metrics.get("dpo/accuracy", math.nan),
    }  # fmt: skip


def summary(runs: list[dict[str, Any]]) -> tuple[list[str], bool]:
    lines = [f"{'seed':>4} {'pairs':>5} {'wall s':>7}  {'train reward by quarter':<28} val start -> end (diff +- SE)"]
    complete, diffs = True, []
    for run in runs:
        diff = run["val_end"] - run["val_start"]
        se = math.hypot(run["val_start_se"], run["val_end_se"])
        diffs.append((diff, se))
        quarters = " ".join(f"{q:.3f}" for q in run["reward_quarters"])
        lines.append(f"{run['seed']:>4} {run['pairs']:>5} {run['wall_s']:>7.1f}  {quarters:<28} "
                     f"{run['val_start']:.3f} -> {run['val_end']:.3f} ({diff:+.3f} +- {se:.3f}, "
                     f"{diff / se if se else math.nan:.1f} SE)")  # fmt: skip
        complete &= run["trained_steps"] > 0 and run["val_rollouts"] > 0  # a solved task's later steps have no pair
    pooled = statistics.fmean(d for d, _ in diffs)
    pooled_se = math.sqrt(sum(se * se for _, se in diffs)) / len(diffs)
    lines.append(f"dpo: val reward change pooled over {len(runs)} seeds {pooled:+.3f} +- {pooled_se:.3f} "
                 f"({pooled / pooled_se if pooled_se else math.nan:.1f} SE)")  # fmt: skip
    return lines, complete


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--val-group-size", type=int, default=4)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--learning-rate", type=float, default=1e-2)
    parser.add_argument("--epochs", type=float, default=2.0, help="DPO passes over each step's pairs")
    parser.add_argument("--pairs", choices=("best-worst", "all"), default="best-worst")
    parser.add_argument("--out", type=Path, help="write every run's numbers here (JSON)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds: that it runs (the tests run it)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps, args.tasks, args.batch, args.val_group_size = [0], 2, 4, 2, 1
    runs = every_arm(args.seeds, ["dpo"], lambda arm, seed, folder: one_run(arm, seed, args, folder), "agl-dpo-")
    lines, complete = summary(runs)
    return finish(runs, lines, complete, args.out)


if __name__ == "__main__":
    sys.exit(main())
