"""A policy per agent (`agent_match` as a mapping: a LoRA adapter each) against one shared policy, at equal steps and
rollouts, on a two-role task designed for the question: the handoff.

    python -m benchmarks.policy_per_agent                       # 3 seeds x {shared, per_agent}, 20 steps, tiny model
    python -m benchmarks.policy_per_agent --model smollm2       # the same on SmolLM2-135M-Instruct
    python -m benchmarks.policy_per_agent --quick               # tiny sizes: that it runs (the tests run it)

The task (fixed before any run; the docs' "A policy per agent" page says why):
- 8 tasks. In each, a planner is asked "Task k: plan the call. Argument: left or right?" and replies with one token;
  a caller is then asked "Task k: call the tool with argument <the planner's>. Form: left or right?" and replies with
  one token. A model that cannot read is mapped onto the choices as in the credit benchmark: a first letter a-m is
  "left", anything else "right".
- The planner is right when its argument is the task's (drawn once per task from its number); the caller is right
  when its form is the opposite of the argument it was handed (left -> right, right -> left). Reward 1 when both are
  right, else 0: one outcome for two calls of two roles.
- The two roles want opposite answers to prompts that look alike; that is the situation a policy per agent is for
  (roles that must behave differently), so the task shows whether separate adapters avoid the interference a shared
  one has, not that they help on every task.
Both arms train the same model (the tiny Qwen2 built offline with seed = the run's seed, or SmolLM2) with the local
Tinker engine (LoRA rank 32 per policy, importance sampling, GRPO with the cookbook's mean baseline, learning rate
1e-2 on the tiny model and 2e-4 on SmolLM2: ten times the full fine-tuning rate of its VERL demo, as LoRA wants;
temperature 1), 8 tasks x 8 rollouts a step, 2 runner processes.
`shared`: agent_match "^(planner|caller)$", one adapter learns from both roles' calls; `per_agent`: agent_match
{"^planner$": "planner", "^caller$": "caller"}, each adapter from its own role's calls (twice the LoRA weights in all).
Success is measured on the sampled policy (temperature 1, 16 rollouts per task = 128) before training, at the middle
and at the end, with its binomial standard error, per run and pooled over the seeds.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

import lightning_otel as agl
from benchmarks._seeded_runs import (
    SUCCESS_HEADER,
    every_arm,
    finish,
    is_measurement,
    pooled_comparison,
    success_cells,
)
from benchmarks._two_choices import MODELS, chat_client, choice_of
from lightning_otel.testing.tiny_model import model_or_tiny

TASKS = 8
ARMS = {"shared": "^(planner|caller)$", "per_agent": {"^planner$": "planner", "^caller$": "caller"}}


def argument_of(task: int) -> str:
    """The argument the planner must hand over for task `task` (fixed by its number)."""
    return random.Random(2000 + task).choice(("left", "right"))


def _ask(llm: agl.LLM, prompt: str) -> str:
    client = chat_client(llm.endpoint, llm.api_key or "unused")
    reply = client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": prompt}],
                                           max_tokens=1)  # fmt: skip
    return reply.choices[0].message.content or ""


@agl.rollout
def handoff_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """The planner's argument, then the caller's form; 1.0 when both are right."""
    with agl.agent("planner"):
        argument = choice_of(_ask(llm, f"Task {task['number']}: plan the call. Argument: left or right?"))
    with agl.agent("caller"):
        form = choice_of(_ask(llm, f"Task {task['number']}: call the tool with argument {argument}. "
                                 "Form: left or right?"))  # fmt: skip
    return float(argument == task["argument"] and form != argument)


def handoff_tasks(count: int) -> list[dict[str, Any]]:
    return [{"task_id": f"task-{k}", "number": k, "argument": argument_of(k)} for k in range(count)]


def one_run(arm: str, seed: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    tasks = handoff_tasks(args.tasks)
    options = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=len(tasks), group_size=args.group_size, max_steps=args.steps,
                              val_every=max(1, args.steps // 2), val_group_size=args.val_group_size, seed=seed),
        sampling=agl.Sampling(max_tokens=1), validation_sampling=agl.Sampling(max_tokens=1),
        trackers=agl.Trackers(logger=()),
    )  # fmt: skip
    engine = agl.LocalEngine(model_or_tiny(args.model, workdir, seed=seed), rank=32, seed=seed)
    algorithm = agl.Tinker(engine, options, learning_rate=args.learning_rate)
    trainer = agl.Trainer(n_runners=2, algorithm=algorithm, adapter={"agent_match": ARMS[arm]}, progress=False)
    started = time.monotonic()
    with agl.quiet(workdir / f"{arm}-{seed}.log"):
        result = trainer.fit(handoff_agent, tasks, tasks)
    return {"arm": arm, "seed": seed, "model": args.model, **result.figures(),
            "seconds": time.monotonic() - started}  # fmt: skip


def summary(runs: list[dict[str, Any]]) -> tuple[list[str], bool]:
    """Lines to print, and whether every run was a measurement (each step trained, validations complete)."""
    lines, complete = [], True
    lines.append(f"{'arm':<9} {'seed':>4} {SUCCESS_HEADER} {'s':>6}")
    for run in runs:
        lines.append(f"{run['arm']:<9} {run['seed']:>4} {success_cells(run)} {run['seconds']:>6.0f}")
        complete &= is_measurement(run)
    lines += pooled_comparison(runs, "arm", "shared", "per_agent", either_way=True)
    return lines, complete


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--val-group-size", type=int, default=16)
    parser.add_argument("--model", choices=MODELS, default="tiny")
    parser.add_argument("--learning-rate", type=float, help="default: 1e-2 on the tiny model, 2e-4 on SmolLM2")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--out", type=Path, help="write every run's numbers here (JSON)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds: that it runs (the tests run it)")
    args = parser.parse_args()
    if args.learning_rate is None:
        args.learning_rate = 2e-4 if args.model == "smollm2" else 1e-2
    if args.quick:
        args.seeds, args.steps, args.tasks, args.group_size, args.val_group_size = [0], 2, 2, 4, 2
    runs = every_arm(args.seeds, args.arms, lambda arm, seed, folder: one_run(arm, seed, args, folder), "agl-policies-")
    lines, complete = summary(runs)
    return finish(runs, lines, complete, args.out)


if __name__ == "__main__":
    sys.exit(main())
