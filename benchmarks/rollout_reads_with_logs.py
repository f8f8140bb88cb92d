"""What putting log records beside their spans costs the trainer's hot path: reading one rollout's spans.

    python -m benchmarks.rollout_reads_with_logs [--spans 2000] [--other-logs 20000] [--quick]

One SQLite store holds two rollouts of `--spans` LLM-call spans each (40 prompt and 20 response token ids, an
agent, an operation) and `--other-logs` log records of other traces; the second rollout has one record a span. Side by
side, median of 20 reads each: the read as it was (stored spans -> flat spans), and the read the collector now
serves (the same, then `attach_logs`): for the rollout whose spans have no records, and for the one whose every
span has one. Prints each median and the ratio to the plain read.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from lightning_otel.collector.receiving.log_records import attach_logs, rows_of, write_logs
from lightning_otel.collector.receiving.otlp_decoding import records_of
from lightning_otel.collector.receiving.otlp_json import flat_span
from lightning_otel.collector.stores.stores import open_store
from lightning_otel.testing.otlp_factory import make_request, make_span, span_id, trace_id

READS = 20
CALL = {"agl.llm.prompt_token_ids": list(range(40)), "agl.llm.response_token_ids": list(range(20))}


def logs_request(pairs: list[tuple[bytes, bytes]]) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    records = request.resource_logs.add().scope_logs.add().log_records
    for index, (trace, span) in enumerate(pairs):
        record = records.add(time_unix_nano=index + 1, event_name="gen_ai.client.inference.operation.details",
                             trace_id=trace, span_id=span)  # fmt: skip
        record.body.string_value = f"record {index}"
    return request


async def measure(spans: int, other_logs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(f"sqlite:///{folder}/store.sqlite3")
        await store.start()
        try:
            for rollout, trace_base in (("bare", 1), ("logged", 2)):
                made = [make_span(trace_base, n + 1, rollout=rollout, attempt="at-1", agent="writer", operation="chat",
                                  attributes=CALL) for n in range(spans)]  # fmt: skip
                for start in range(0, spans, 512):
                    await store.write(records_of(make_request(made[start : start + 512])).records)
            others = [(trace_id(1000 + n // 50), span_id(n + 1)) for n in range(other_logs)]
            mine = [(trace_id(2), span_id(n + 1)) for n in range(spans)]
            for start in range(0, len(others) + len(mine), 2000):
                await write_logs(store, rows_of(logs_request((others + mine)[start : start + 2000])).rows)

            async def read(rollout: str, attach: bool) -> float:
                began = time.perf_counter()
                flat = [flat_span(s) for s in await store.rollout_spans(rollout, "at-1")]
                if attach:
                    await attach_logs(store, flat)
                assert len(flat) == spans
                return time.perf_counter() - began

            timings: dict[str, list[float]] = {}
            for _ in range(READS):  # interleaved: the same machine state for each
                for label, rollout, attach in (("plain read", "bare", False), ("+ attach, no records", "bare", True),
                                               ("+ attach, a record a span", "logged", True)):  # fmt: skip
                    timings.setdefault(label, []).append(await read(rollout, attach))
            return {label: statistics.median(values) for label, values in timings.items()}
        finally:
            await store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=2000)
    parser.add_argument("--other-logs", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="200 spans, 1,000 other records: that it runs")
    args = parser.parse_args(argv)
    spans, other = (200, 1000) if args.quick else (args.spans, args.other_logs)
    medians = asyncio.run(measure(spans, other))
    base = medians["plain read"]
    print(f"one rollout of {spans} spans, {other} log records of other traces; median of {READS} reads:")
    for label, value in medians.items():
        print(f"  {label:28s} {value * 1000:8.2f} ms   ratio to the plain read {value / base:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
