"""`lightning-otel`: the project's command line (`demo`, `test-server`)."""

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
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from lightning_otel.demo import run_demo

        sys.exit(run_demo(endpoint=args.endpoint))
    if args.command == "test-server":
        from lightning_otel.testing.server import main as serve

        serve(["--host", args.host, "--port", str(args.port), *(["--strict"] if args.strict else [])])


if __name__ == "__main__":
    main()
