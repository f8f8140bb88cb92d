"""Train the agent service with VERL (GRPO): the trainer side of verl's agent_lightning_like recipe.

    python train_agent_service.py --agent-url http://127.0.0.1:8765/chat --otlp-port 4318
    python train_agent_service.py --agent-url ... --ci-fast      # 2 GRPO steps on 4 tasks (CPU: a tiny model)

The service runs elsewhere (see README.md): each rollout POSTs its task to `--agent-url` with the policy's
per-rollout URL (`lightning_otel.HttpAgent`). The embedded collector listens on `--collector-port` (query/API) and
`--otlp-port` (OTLP/HTTP, where an instrumented service sends its spans); `--external-store-address` uses a running
agl-otel-collector instead. The policy's address is also written to `--notify-file` (default
`$LLM_SERVER_NOTIFY_FILE`) for services that read it there. Every step prints the samples trained and the calls the
policy gateway served; summary.json keeps both.
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
AGENT_INSTRUCTIONS = (
    "You are a careful math tutor. Solve the problem step by step, call calc_gsm8k_reward with your final answer "
    "as a number, then end with '#### <answer>'."
)  # the service's (agent_server.py), for the tiny model's tokenizer


def gpu_config(model: str) -> dict[str, Any]:
    """The recipe's settings, scaled to one GPU."""
    return {
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": 16, "max_prompt_length": 2048, "max_response_length": 1024},
        "actor_rollout_ref": {
            "rollout": {"name": "vllm", "n": 4, "multi_turn": {"format": "hermes"}},
            "actor": {"ppo_mini_batch_size": 16, "optim": {"lr": 1e-6}},
            "model": {"path": model},
        },
        "trainer": {"n_gpus_per_node": 1, "val_before_train": True, "test_freq": 8, "save_freq": -1},
    }


def cpu_config(model: Path, tasks_per_step: int) -> dict[str, Any]:
    return {
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": tasks_per_step, "max_prompt_length": 1024, "max_response_length": 32},
        "actor_rollout_ref": {
            "model": {"path": str(model)},
            "rollout": {"n": 2, "temperature": 1.0, "log_prob_micro_batch_size_per_gpu": 8},
            "actor": {"ppo_mini_batch_size": tasks_per_step, "ppo_micro_batch_size_per_gpu": 8, "optim": {"lr": 1e-4}},
        },
        "trainer": {"val_before_train": False, "test_freq": -1, "save_freq": -1, "logger": ["console"]},
    }


def tiny_policy(directory: Path, tasks: list[dict[str, Any]]) -> Path:
    """A tiny random Llama-shaped model with a BPE trained on the service's prompts (short prompts on CPU)."""
    from lightning_otel.testing import save_tiny_model, train_tokenizer

    lines = [AGENT_INSTRUCTIONS] + [text for task in tasks for text in (task["question"], f"#### {task['answer']}")]
    tokenizer = train_tokenizer(lines, vocab_size=1024, space_after_words=True)
    return save_tiny_model(directory, hidden_size=64, layers=2, tokenizer=tokenizer, architecture="llama")


def on_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent-url", default="http://127.0.0.1:8765/chat", help="the service's /chat endpoint")
    parser.add_argument("--train-file", type=Path, default=HERE / "data" / "train.jsonl", help="JSONL or parquet")
    parser.add_argument("--val-file", type=Path, default=HERE / "data" / "test.jsonl", help="JSONL or parquet")
    parser.add_argument("--model", default="Qwen/Qwen2.5-1.5B-Instruct",
                        help="a Hugging Face id or local directory; 'tiny' builds one offline (CPU)")  # fmt: skip
    parser.add_argument("--ci-fast", action="store_true", help="2 steps on 4 tasks, no validation")
    parser.add_argument("--steps", type=int, help="GRPO steps (default: one epoch)")
    parser.add_argument("--agent-match", default="^Assistant$", help="which agents' calls are trained (a regex)")
    parser.add_argument("--n-runners", type=int, default=2, help="runner processes (each POSTs rollouts)")
    parser.add_argument("--external-store-address", help="a running agl-otel-collector's query URL")
    parser.add_argument("--collector-host", default="127.0.0.1", help="0.0.0.0: services on other machines")
    parser.add_argument("--collector-port", type=int, default=16686, help="the embedded collector's API port")
    parser.add_argument("--otlp-port", type=int, default=4318, help="the embedded collector's OTLP/HTTP port")
    parser.add_argument("--gateway-host", default="127.0.0.1", help="0.0.0.0: services on other machines")
    parser.add_argument("--notify-file", type=Path, help="where the policy's address is written "
                        "(default $LLM_SERVER_NOTIFY_FILE)")  # fmt: skip
    parser.add_argument("--span-wait-s", type=float, default=30.0, help="bound on waiting for the service's spans")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--workdir", type=Path, default=HERE / "runs", help="summary.json, the tiny model")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="other libraries' output here (default: train.log in --workdir)")  # fmt: skip
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.train_file.exists() and args.train_file.parent == HERE / "data":
        from gsm8k_data import prepare

        prepare(HERE / "data")  # the default data, built on first use
    try:
        train_data, val_data = agl.load_tasks(args.train_file), agl.load_tasks(args.val_file)
    except (OSError, ValueError) as exc:
        sys.exit(f"train_agent_service: {exc} (gsm8k_data.py makes the data)")
    device = on_device(args.device)
    steps = args.steps
    if args.ci_fast:  # a random tiny policy: partial credit gives its groups a signal (agent_server.partial_credit)
        train_data, val_data, steps = [{**task, "partial_credit": True} for task in train_data[:4]], [], 2
    args.workdir.mkdir(parents=True, exist_ok=True)
    if device == "cpu":
        model = args.model
        if not Path(model).is_dir():
            if model != "tiny" and not args.ci_fast:
                sys.exit(f"train_agent_service: on CPU --model must be a local directory or 'tiny', not {model!r}")
            model = str(tiny_policy(args.workdir / "model-tiny", train_data + val_data))
            print(f"policy: a tiny random model built offline ({model})")
        config = cpu_config(Path(model), tasks_per_step=2)
        if val_data:
            config["trainer"].update(val_before_train=True, test_freq=4)
    else:
        model = args.model
        config = gpu_config(model)
    config["trainer"]["total_epochs"] = 1000 if steps else 1
    if steps:
        config["trainer"]["total_training_steps"] = steps
    config["trainer"].setdefault("default_local_dir", str(args.workdir / "checkpoints"))
    print(f"GRPO with VERL on {device}: {len(train_data)} training tasks, {len(val_data)} validation tasks, agent "
          f"service {args.agent_url}, agent_match={args.agent_match!r}", flush=True)  # fmt: skip
    # the collector: a running one (--external-store-address), or an embedded one where the service can reach it
    embedded = CollectorConfig.embedded(host=args.collector_host, query_port=args.collector_port,
                                        http_port=args.otlp_port)  # fmt: skip
    trainer = agl.Trainer(
        n_runners=args.n_runners,
        algorithm=agl.VERL(config, agl.TrainingOptions(gateway_host=args.gateway_host), device=device),
        adapter={"agent_match": args.agent_match},
        initial_resources={"main_llm": agl.LLM("http://unused.invalid/v1", model)},  # VERL serves the policy
        collector=args.external_store_address or embedded,
        progress=False,
        settings=agl.RunSettings(policy_notify_file=args.notify_file, span_wait_s=args.span_wait_s),
    )
    try:
        if not args.verbose:
            print(f"other libraries' output (Ray, verl, the runners): {args.workdir / 'train.log'}", flush=True)
        with agl.quiet(args.workdir / "train.log", verbose=args.verbose):
            agent = agl.HttpAgent(args.agent_url)
            result = trainer.fit(agent, train_dataset=train_data, val_dataset=val_data or None)
    except agl.NothingTrained as exc:
        print(f"train_agent_service: FAILED: {exc}", file=sys.stderr)
        return 1
    steps_done = [{"step": r.step, "metrics": r.metrics, "sample_agents": r.sample_agents} for r in result.steps]
    (args.workdir / "summary.json").write_text(json.dumps({"steps": steps_done}, indent=1, default=str))
    samples = sum(r.metrics.get("rollout/triplets", 0) for r in result.steps)
    served = sum(r.metrics.get("rollout/gateway_calls", 0) for r in result.steps)
    print(f"done: {len(steps_done)} GRPO steps, {samples:.0f} samples of {served:.0f} calls the gateway served; "
          f"metrics in {args.workdir / 'summary.json'}")  # fmt: skip
    if samples < served:  # every call of this service is the Assistant's: a call not trained was lost
        print(f"train_agent_service: FAILED: {served - samples:.0f} served calls were not trained (agent_match "
              f"{args.agent_match!r}, or spans missing: see 'incomplete' above)", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
