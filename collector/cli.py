"""`agl-otel-collector` (also `python -m lightning_otel.collector`): run the collector, or print Jaeger links.

    agl-otel-collector [--host H] [--http-port 4318] [--grpc-port 4317] [--query-port 16686] [--store URL]
                       [--auth-token T] [--forward-otlp URL ...] [--jaeger-ui-url URL] [--phoenix-ui-url URL]
                       [--tokenizer PATH]     (the rollout view: http://HOST:QUERY_PORT/ui)
    agl-otel-collector link ROLLOUT_ID [--query-url URL] [--jaeger-ui-url URL] [--auth-token T]

Every flag can also be set as an `AGL_COLLECTOR_<FLAG>` environment variable (`AGL_COLLECTOR_STORE`,
`AGL_COLLECTOR_AUTH_TOKEN`, `AGL_COLLECTOR_FORWARD_OTLP` with URLs separated by commas, ...); flags win.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import NoReturn

from lightning_otel.collector.stores.sqlite_store import default_sqlite_url
from lightning_otel.collector.tcp_listener import port_number, port_or_off

DEFAULT_JAEGER_UI = "http://127.0.0.1:16686"


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"AGL_COLLECTOR_{name}", default)


def _env_int(name: str, default: int) -> int:
    value = _env(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"AGL_COLLECTOR_{name}={value!r} must be an integer") from None


class OneLineErrors(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming the argument and the problem (exit 2), not the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (--help lists the options)\n")


def store_url(text: str) -> str:
    """`--store`: a URL as it is; a plain path is a SQLite file (relative to here: sqlite:/// plus a relative path
    would name an absolute one). `sqlite:///sub/name.db` whose /sub (or /name.db) does not exist at the filesystem's
    root most likely meant ./sub/name.db, so it is refused with both spellings (`sqlite:////sub/name.db`: the
    root)."""
    from pathlib import Path

    from lightning_otel.collector.stores.sqlite_store import new_directory_at_the_root

    if refused := new_directory_at_the_root(text):
        raise argparse.ArgumentTypeError(refused)
    if "://" in text:
        return text

    return f"sqlite:///{Path(text).expanduser().resolve()}"


def serve_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="agl-otel-collector",
        description="Durable OTLP collector for lightning-otel: receives spans over OTLP/HTTP and gRPC, stores "
        "them in SQLite or PostgreSQL, serves rollouts to the trainer and traces to Jaeger UIs. "
        "`agl-otel-collector link ROLLOUT_ID` prints Jaeger links for a rollout.",
    )
    parser.add_argument("--host", default=_env("HOST", "127.0.0.1"), help="address to bind (default 127.0.0.1)")
    parser.add_argument("--http-port", type=port_number, default=_env_int("HTTP_PORT", 4318), help="OTLP/HTTP port")
    parser.add_argument(
        "--grpc-port", type=port_or_off, default=_env_int("GRPC_PORT", 4317), help="OTLP/gRPC port (-1 turns gRPC off)"
    )
    parser.add_argument(
        "--query-port",
        type=port_number,
        default=_env_int("QUERY_PORT", 16686),
        help="query API port (rollouts, Jaeger APIs, /healthz, /metrics)",
    )
    parser.add_argument(
        "--store",
        type=store_url,
        default=_env("STORE") or default_sqlite_url(),
        help="a SQLite file's path, sqlite:///ABSOLUTE/PATH (add ?synchronous=full for power-loss durability) or "
        "postgresql://...",
    )
    parser.add_argument(
        "--auth-token",
        default=_env("AUTH_TOKEN"),
        help="require `Authorization: Bearer TOKEN` on every route and gRPC call",
    )
    forward_default = [url for url in (_env("FORWARD_OTLP") or "").split(",") if url]
    parser.add_argument(
        "--forward-otlp",
        action="append",
        default=None,
        metavar="URL",
        help=f"also export everything to this OTLP receiver (repeatable; default {forward_default})",
    )
    parser.add_argument("--jaeger-ui-url", default=_env("JAEGER_UI_URL"), help="base URL of a Jaeger UI, for links")
    parser.add_argument(
        "--phoenix-ui-url", default=_env("PHOENIX_UI_URL"), help="base URL of an Arize Phoenix UI, for links from /ui"
    )
    parser.add_argument(
        "--tokenizer",
        default=_env("TOKENIZER"),
        metavar="PATH",
        help="the policy's tokenizer (a Hugging Face folder or tokenizer.json): /ui shows token ids as text",
    )
    parser.add_argument(
        "--retention",
        default=_env("RETENTION"),
        metavar="DURATION",
        help="delete spans that ended longer ago than this, e.g. 7d or 12h (default: keep all)",
    )
    parser.add_argument("--max-body-bytes", type=int, default=_env_int("MAX_BODY_BYTES", 64 << 20))
    parser.add_argument(
        "--max-in-flight-bytes",
        type=int,
        default=_env_int("MAX_IN_FLIGHT_BYTES", 64 << 20),
        help="request bytes processed at once before answering 503 + Retry-After",
    )
    parser.set_defaults(forward_default=forward_default)
    return parser


def link_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="agl-otel-collector link", description="Print a Jaeger UI link for every trace of a rollout."
    )
    parser.add_argument("rollout_id")
    port = _env_int("QUERY_PORT", 16686)
    parser.add_argument(
        "--query-url", default=_env("QUERY_URL", f"http://127.0.0.1:{port}"), help="the collector's query API"
    )
    parser.add_argument("--jaeger-ui-url", default=_env("JAEGER_UI_URL", DEFAULT_JAEGER_UI))
    parser.add_argument("--auth-token", default=_env("AUTH_TOKEN"))
    return parser


def _retention_s(text: str | None) -> float | None:
    if not text:
        return None
    from lightning_otel.collector.query_params import BadQuery, parse_duration_ns

    try:
        return parse_duration_ns(text) / 1e9
    except BadQuery as exc:
        raise SystemExit(f"agl-otel-collector: --retention: {exc}") from None


async def _serve(args: argparse.Namespace) -> None:
    from lightning_otel.collector.reads.token_text import TokenizerUnavailable
    from lightning_otel.collector.server import Collector, CollectorConfig

    config = CollectorConfig(
        host=args.host,
        http_port=args.http_port,
        grpc_port=None if args.grpc_port < 0 else args.grpc_port,
        query_port=args.query_port,
        store_url=args.store,
        auth_token=args.auth_token or None,
        forward_otlp=args.forward_otlp if args.forward_otlp is not None else args.forward_default,
        jaeger_ui_url=args.jaeger_ui_url,
        phoenix_ui_url=args.phoenix_ui_url,
        tokenizer=args.tokenizer,
        max_body_bytes=args.max_body_bytes,
        max_in_flight_bytes=args.max_in_flight_bytes,
        retention_s=_retention_s(args.retention),
    )
    collector = Collector(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        addresses = await collector.start()
    except TokenizerUnavailable as exc:
        raise SystemExit(f"agl-otel-collector: --tokenizer: {exc}") from None
    print("agl-otel-collector ready", *addresses.lines(), sep="\n", flush=True)
    for url in config.forward_otlp:
        print(f"  forwarding to {url}", flush=True)
    if config.tokenizer:
        print(f"  tokenizer  {config.tokenizer} (the rollout view decodes token ids)", flush=True)
    if config.jaeger_ui_url:
        print(
            f"  Jaeger UI  {config.jaeger_ui_url.rstrip('/')}/search (links: agl-otel-collector link ROLLOUT_ID)",
            flush=True,
        )
    await stop.wait()
    print("agl-otel-collector: draining and stopping", flush=True)
    await collector.stop()
    print("agl-otel-collector: stopped", flush=True)


def _link(args: argparse.Namespace) -> int:
    from lightning_otel.collector.client import Client, CollectorError

    try:
        spans = Client(args.query_url, auth_token=args.auth_token).rollout_spans(args.rollout_id)
    except CollectorError as exc:
        print(f"agl-otel-collector link: {exc}", file=sys.stderr)
        return 1
    trace_ids = list(dict.fromkeys(span["traceId"] for span in spans))
    if not trace_ids:
        print(f"agl-otel-collector link: no spans stored for rollout {args.rollout_id!r}", file=sys.stderr)
        return 1
    base = args.jaeger_ui_url.rstrip("/")
    for trace_id in trace_ids:
        print(f"{base}/trace/{trace_id}")
    return 0


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["link"]:
        sys.exit(_link(link_parser().parse_args(argv[1:])))
    args = serve_parser().parse_args(argv)
    from lightning_otel.collector.stores.store import TransientStoreError

    try:
        asyncio.run(_serve(args))
    except (OSError, ValueError) as exc:  # the input: a port in use or out of range, a bad store URL
        print(f"agl-otel-collector: {exc}", file=sys.stderr)
        sys.exit(2)
    except TransientStoreError as exc:  # the store: no database there, a file that is not one
        print(f"agl-otel-collector: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
