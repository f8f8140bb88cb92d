"""`lightning-otel-run CMD ...`: run a Python program instrumented, with no change to its code.

    lightning-otel-run python my_agent.py --its-own-flags
    lightning-otel-run --endpoint http://127.0.0.1:4318 --service-name sql-agent --token-ids -- python agent.py

Like `opentelemetry-instrument`, it puts a `sitecustomize` on `PYTHONPATH` that runs `import lightning_otel.auto`
in the child before its own code; options become the matching environment variables.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lightning-otel-run",
        description="Run a Python program with lightning-otel instrumentation (no code change).",
    )
    parser.add_argument("--endpoint", help="OTLP base URL (sets OTEL_EXPORTER_OTLP_ENDPOINT)")
    parser.add_argument("--protocol", choices=["http/protobuf", "grpc"], help="OTLP protocol")
    parser.add_argument("--service-name", help="service.name of the spans (sets OTEL_SERVICE_NAME)")
    parser.add_argument("--token-ids", action="store_true", help="ask every endpoint for token ids")
    parser.add_argument("--token-id-endpoints", metavar="REGEX", help="ask matching endpoints for token ids")
    parser.add_argument("--capture-content", action="store_true", help="record message content on spans")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    return parser


def child_environment(args: argparse.Namespace, base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    bootstrap = str(Path(__file__).resolve().parents[1] / "_bootstrap")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (bootstrap, env.get("PYTHONPATH", "")) if p)
    env["AGL_RUN_ACTIVE"] = "1"
    if args.endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = args.endpoint
    if args.protocol:
        env["OTEL_EXPORTER_OTLP_PROTOCOL"] = args.protocol
    if args.service_name:
        env["OTEL_SERVICE_NAME"] = args.service_name
    if args.token_ids:
        env["AGL_TOKEN_IDS"] = "1"
    if args.token_id_endpoints:
        env["AGL_TOKEN_ID_ENDPOINTS"] = args.token_id_endpoints
    if args.capture_content:
        env["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    return env


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        build_parser().error("give the program to run, e.g. `lightning-otel-run python my_agent.py`")
    executable = shutil.which(command[0])
    if executable is None:
        sys.exit(f"lightning-otel-run: command not found: {command[0]}")
    os.execve(executable, command, child_environment(args, dict(os.environ)))


if __name__ == "__main__":
    main()
