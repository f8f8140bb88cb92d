"""What one OTLP/HTTP export costs the process that sends it: our exporter's kept-alive connection against the SDK's
default transport (a `requests` session) and its urllib3 transport, side by side.

    python -m benchmarks.otlp_export_cost [--exports 500] [--spans 10] [--rounds 2]

A runner flushes a rollout's spans (~10) in one export after every rollout, so this cost is paid once per rollout.
The collector (`agl-otel-collector`, SQLite) runs in its own process, so the figures are the sender's CPU only
(`time.process_time`); the arms take turns, round by round, on the same spans (50 token ids each).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lightning_otel.capture.otlp_exporters import FAST_HTTP, FastHTTPSpanExporter, otlp_http_exporter
from lightning_otel.testing.ports import free_port


def make_spans(count: int) -> list[ReadableSpan]:
    memory, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for index in range(count):
        with provider.get_tracer("bench").start_as_current_span(f"chat {index}") as span:
            span.set_attribute("agl.rollout.id", "ro-1")
            span.set_attribute("agl.llm.prompt_token_ids", list(range(50)))
    return list(memory.get_finished_spans())


def start_collector(folder: Path) -> tuple[subprocess.Popen, str]:
    otlp, query = free_port(), free_port()
    command = [sys.executable, "-m", "lightning_otel.collector", "--store", f"sqlite:///{folder}/c.sqlite3",
               "--http-port", str(otlp), "--query-port", str(query), "--grpc-port", "-1"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{query}/healthz").status_code == 200:
                return process, f"http://127.0.0.1:{otlp}/v1/traces"
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    sys.exit("the collector did not start")


def cpu_ms_per_export(exporter: SpanExporter, spans: list[ReadableSpan], exports: int) -> float:
    for _ in range(10):  # connect, warm up
        exporter.export(spans)
    began = time.process_time()
    for _ in range(exports):
        if exporter.export(spans).name != "SUCCESS":
            sys.exit("an export failed: nothing measured")
    return (time.process_time() - began) / exports * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", type=int, default=500)
    parser.add_argument("--spans", type=int, default=10, help="spans per export (a rollout's flush)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds: that it runs (the tests run it)")
    args = parser.parse_args()
    if args.quick:
        args.exports, args.rounds = 30, 1
    if not FAST_HTTP:
        sys.exit("this opentelemetry-exporter-otlp-proto-http release has no transport parameter: ours is the SDK's")
    from opentelemetry.exporter.http.transport._urllib3 import Urllib3HTTPTransport

    spans = make_spans(args.spans)
    with tempfile.TemporaryDirectory(prefix="agl-export-bench-") as folder:
        collector, endpoint = start_collector(Path(folder))
        try:
            arms = {
                "SDK default (requests session)": lambda: FastHTTPSpanExporter(endpoint=endpoint),
                "SDK urllib3 transport": lambda: FastHTTPSpanExporter(endpoint, _transport=Urllib3HTTPTransport()),
                "lightning-otel (kept http.client connection)": lambda: otlp_http_exporter(endpoint=endpoint),
            }
            figures: dict[str, list[float]] = {name: [] for name in arms}
            for _ in range(args.rounds):
                for name, build in arms.items():
                    exporter = build()
                    figures[name].append(cpu_ms_per_export(exporter, spans, args.exports))
                    exporter.shutdown()
        finally:
            collector.terminate()
            collector.wait(30)
    print(f"sender CPU per export of {args.spans} spans, {args.exports} exports x {args.rounds} rounds, ms (by round)")
    for name, values in figures.items():
        print(f"  {name:46} {statistics.median(values):6.3f}  ({', '.join(f'{v:.3f}' for v in values)})")
    default, ours = (statistics.median(figures[name]) for name in (next(iter(arms)), list(arms)[-1]))
    print(f"ratio ours / SDK default: {ours / default:.2f}x")


if __name__ == "__main__":
    main()
