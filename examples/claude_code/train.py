"""Train the calls Claude Code makes with GRPO (VERL): Claude Code runs unmodified in runner processes, one fresh
folder a rollout, pointed at the policy gateway (Anthropic's Messages API, exact token ids) with its telemetry sent
to the collector, where its spans name the agent of each call (`main`, or a sub-agent such as `Explore`).

    npm ci                                    # Claude Code, pinned by package-lock.json
    python train.py --ci-fast                 # one GRPO step on CPU with a tiny random policy
    python train.py --model /path/to/model --device cuda --steps 50 --agent-match '^main$'
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import lightning_otel as agl
from lightning_otel.collector import CollectorConfig

HERE = Path(__file__).resolve().parent
AGENT = "agent:claude_code_rollout"


def config_for(model: str, device: str, steps: int, tasks_per_step: int) -> dict[str, Any]:
    # Claude Code's prompt (system prompt, tool schemas, reminders) is ~13 KB of text before the task
    prompt, response = (16384, 24) if device == "cpu" else (32768, 2048)
    gpu_rollout, gpu_trainer = ({}, {}) if device == "cpu" else ({"name": "vllm"}, {"n_gpus_per_node": 1})
    return {
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": tasks_per_step, "max_prompt_length": prompt, "max_response_length": response},
        "actor_rollout_ref": {
            "model": {"path": model},
            "rollout": {"n": 2, "temperature": 1.0, "log_prob_micro_batch_size_per_gpu": 2, **gpu_rollout},
            "actor": {"ppo_mini_batch_size": tasks_per_step, "ppo_micro_batch_size_per_gpu": 2, "optim": {"lr": 1e-5}},
        },
        "trainer": {
            "total_epochs": 1000,
            "total_training_steps": steps,
            "val_before_train": False,
            "test_freq": -1,
            "save_freq": -1,
            "logger": ["console"],
            "project_name": "claude-code",
            "experiment_name": "answer-file",
            **gpu_trainer,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ci-fast", action="store_true", help="one step, 2 tasks x 2 rollouts, a tiny random policy")
    parser.add_argument("--model", default="tiny", help="a model folder, or `tiny` (built offline)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--agent-match", default="^main$", help="whose calls train: `main`, a sub-agent (`Explore`)")
    parser.add_argument("--n-runners", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=HERE / "runs")
    args = parser.parse_args(argv)
    from agent import claude_command

    claude_command()  # installed, or one line saying how
    tasks = [json.loads(line) for line in (HERE / "tasks.jsonl").read_text().splitlines() if line.strip()]
    steps = 1 if args.ci_fast else args.steps
    args.workdir.mkdir(parents=True, exist_ok=True)
    model = args.model
    if model == "tiny":
        from lightning_otel.testing import save_tiny_model

        model = str(save_tiny_model(args.workdir / "model-tiny", context_length=16384))
    config = config_for(model, args.device, steps, tasks_per_step=2)
    config["trainer"]["default_local_dir"] = str(args.workdir / "checkpoints")
    store = f"sqlite:///{args.workdir / 'collector.sqlite3'}"
    trainer = agl.Trainer(
        n_runners=args.n_runners,
        algorithm=agl.VERL(config, device=args.device),
        adapter={"agent_match": args.agent_match},
        initial_resources={"main_llm": agl.LLM("http://unused.invalid/v1", model)},  # VERL serves it (gateway)
        collector=CollectorConfig.embedded(store_url=store),
        progress=False,
    )
    print(f"GRPO with VERL on {args.device}: Claude Code on {len(tasks)} tasks, agent_match={args.agent_match!r}; "
          f"other libraries' output: {args.workdir / 'train.log'}", flush=True)  # fmt: skip
    try:
        with agl.quiet(args.workdir / "train.log"):
            result = trainer.fit(AGENT, train_dataset=tasks[: 2 * steps] if args.ci_fast else tasks)
    except agl.NothingTrained as exc:
        print(f"train: FAILED: {exc}", file=sys.stderr)
        return 1
    steps_done = [{"step": r.step, "metrics": r.metrics, "sample_agents": r.sample_agents} for r in result.steps]
    (args.workdir / "steps.json").write_text(json.dumps(steps_done, indent=1, default=str))
    for record in result.steps:
        print(f"step {record.step}: samples by agent {record.sample_agents}")
    print(f"rollout view: lightning-otel ui {args.workdir / 'collector.sqlite3'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
