"""`lightning-otel`: the project's command line (`demo`, `test-server`, `runner`, `train --dev`)."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lightning-otel", description="Train the agents you already have.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="trace a two-agent program and show what a trainer receives")
    demo.add_argument("--endpoint", help="also export the spans over OTLP to this base URL")
    server = commands.add_parser("test-server", help="run the OpenAI-compatible test server (vLLM token ids)")
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--port", type=int, default=8000)
    server.add_argument("--strict", action="store_true", help="reject vLLM-only fields like api.openai.com")
    runner = commands.add_parser(
        "runner", help="run rollouts of a training from anywhere: claim them from its collector, run the agent"
    )
    runner.add_argument("--collector", required=True, help="the collector's query URL, e.g. http://trainer:16686")
    runner.add_argument("--agent", required=True, help="the agent as package.module:name (LitAgent or @rollout)")
    runner.add_argument("--concurrency", type=int, default=16, help="rollouts run at once (default 16)")
    runner.add_argument("--runner-id", help="a name for this runner (default host-pid-random)")
    runner.add_argument("--auth-token", help="the collector's bearer token (or AGL_COLLECTOR_AUTH_TOKEN)")
    runner.add_argument("--otlp-endpoint", help="where to send spans (default: the collector's advertised OTLP port)")
    runner.add_argument("--max-rollouts", type=int, help="exit after this many rollouts")
    train = commands.add_parser("train", help="run an agent on a dataset for training (today: --dev, a dry run)")
    train.add_argument("--agent", required=True, help="the agent as package.module:name (LitAgent or @rollout)")
    train.add_argument("--train", required=True, help="tasks: a .jsonl file (one JSON object per line) or a JSON list")
    train.add_argument("--dev", action="store_true", help="run a few tasks through Trainer.dev and print everything")
    train.add_argument("--n-tasks", type=int, default=4, help="tasks to run with --dev (default 4)")
    train.add_argument("--agent-match", default=None, help="regex on gen_ai.agent.name selecting the trained calls")
    train.add_argument("--base-url", help="the policy's OpenAI-compatible endpoint (main_llm)")
    train.add_argument("--model", default="agl-tiny", help="the model name sent to it")
    train.add_argument("--test-server", action="store_true", help="serve main_llm from the built-in test server")
    train.add_argument("--runners", type=int, default=1)
    return parser


def load_tasks(path: str) -> list:
    """Tasks from a JSON list file or a JSONL file (blank lines skipped); a clear error for anything else."""
    import json
    from pathlib import Path

    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        tasks = json.loads(text)
    else:
        tasks = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not tasks:
        raise ValueError(f"{path} holds no tasks")
    return tasks


def run_train(args: argparse.Namespace) -> int:
    import contextlib
    import os

    import lightning_otel
    from lightning_otel.lit_agent import load_agent

    if not args.dev:
        print(
            "lightning-otel train: training with VERL is not built yet; `--dev` runs the agent on a few tasks through "
            "Trainer.dev (spans, selected samples, rewards) to check it",
            file=sys.stderr,
        )
        return 2
    if bool(args.base_url) == bool(args.test_server):
        print("lightning-otel train: give --base-url URL or --test-server", file=sys.stderr)
        return 2
    sys.path.insert(0, os.getcwd())
    try:
        agent = load_agent(args.agent)
        tasks = load_tasks(args.train)
    except (ImportError, AttributeError, OSError, ValueError, TypeError) as exc:
        print(f"lightning-otel train: {exc}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        base_url = args.base_url
        if args.test_server:
            from lightning_otel.testing import OpenAITestServer

            base_url = stack.enter_context(OpenAITestServer()).base_url
        trainer = lightning_otel.Trainer(
            n_runners=args.runners,
            adapter={"agent_match": args.agent_match},
            initial_resources={"main_llm": lightning_otel.LLM(base_url, args.model)},
        )
        trainer.dev(agent, tasks, n_tasks=args.n_tasks)
    return 0


def run_runner(args: argparse.Namespace) -> int:
    import logging
    import os

    from lightning_otel.collector.client import CollectorError
    from lightning_otel.lit_agent import load_agent
    from lightning_otel.runner import run_runner_process

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.path.insert(0, os.getcwd())  # `--agent my_agents:agent` from the current directory, like python -m
    try:
        agent = load_agent(args.agent)
    except (ImportError, AttributeError, ValueError, TypeError) as exc:
        print(f"lightning-otel runner: cannot load --agent {args.agent!r}: {exc}", file=sys.stderr)
        return 2
    try:
        stats = run_runner_process(
            agent,
            args.collector,
            runner_id=args.runner_id,
            max_concurrency=args.concurrency,
            auth_token=args.auth_token or os.environ.get("AGL_COLLECTOR_AUTH_TOKEN"),
            otlp_endpoint=args.otlp_endpoint,
            max_rollouts=args.max_rollouts,
        )
    except CollectorError as exc:
        print(f"lightning-otel runner: {exc}", file=sys.stderr)
        return 1
    print(
        f"runner done: {stats.claimed} claimed, {stats.succeeded} succeeded, {stats.failed} failed "
        f"({stats.stopped} stopped)",
        file=sys.stderr,
    )
    return 0


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from lightning_otel.demo import run_demo

        sys.exit(run_demo(endpoint=args.endpoint))
    if args.command == "runner":
        sys.exit(run_runner(args))
    if args.command == "train":
        sys.exit(run_train(args))
    if args.command == "test-server":
        from lightning_otel.testing.server import main as serve

        serve(["--host", args.host, "--port", str(args.port), *(["--strict"] if args.strict else [])])


if __name__ == "__main__":
    main()
