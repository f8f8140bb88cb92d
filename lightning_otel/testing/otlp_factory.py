"""Deterministic OTLP spans and requests for the collector tests."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

BASE_NS = 1_790_000_000_000_000_000


def trace_id(n: int) -> bytes:
    return n.to_bytes(16, "big")


def span_id(n: int) -> bytes:
    return n.to_bytes(8, "big")


def value(v: Any) -> AnyValue:
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    if isinstance(v, (list, tuple)):
        return AnyValue(array_value=ArrayValue(values=[value(x) for x in v]))
    return AnyValue(string_value=str(v))


def kv(attributes: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=value(v)) for k, v in attributes.items()]


def make_span(
    trace: int,
    span: int,
    *,
    parent: int = 0,
    name: str = "op",
    rollout: str | None = None,
    attempt: str | None = None,
    agent: str | None = None,
    operation: str | None = None,
    start_us: int = 0,
    duration_us: int = 1000,
    kind: int = 1,
    status: int = 0,
    attributes: dict[str, Any] | None = None,
) -> Span:
    attrs = dict(attributes or {})
    for key, val in (
        ("agl.rollout.id", rollout),
        ("agl.attempt.id", attempt),
        ("gen_ai.agent.name", agent),
        ("gen_ai.operation.name", operation),
    ):
        if val is not None:
            attrs[key] = val
    start = BASE_NS + start_us * 1000
    return Span(
        trace_id=trace_id(trace),
        span_id=span_id(span),
        parent_span_id=span_id(parent) if parent else b"",
        name=name,
        kind=kind,
        start_time_unix_nano=start,
        end_time_unix_nano=start + duration_us * 1000,
        attributes=kv(attrs),
        status=Status(code=status),
    )


def make_request(spans: list[Span], service: str = "svc", scope: str = "tests") -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(kv({"service.name": service}))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = scope
    scope_spans.spans.extend(spans)
    return request


def records(spans: list[Span], service: str = "svc") -> list:
    from lightning_otel.collector.receiving.otlp_decoding import records_of

    return records_of(make_request(spans, service)).records


def golden_request() -> ExportTraceServiceRequest:
    """A small agent trace with every shape the Jaeger outputs must render: parent/child, a link, an event, an
    error status with a message, CLIENT and INTERNAL kinds, int64 beyond 2^53, doubles, bools, arrays."""
    root = make_span(
        0xABC,
        1,
        name="invoke_agent writer",
        rollout="r-1",
        attempt="a-1",
        agent="writer",
        operation="invoke_agent",
        duration_us=5000,
    )
    llm = make_span(
        0xABC,
        2,
        parent=1,
        name="chat tiny",
        kind=3,
        rollout="r-1",
        attempt="a-1",
        agent="writer",
        operation="chat",
        start_us=100,
        duration_us=2000,
        attributes={
            "agl.llm.prompt_token_ids": [151644, 8948],
            "gen_ai.usage.input_tokens": 2,
            "big": 2**60,
            "ratio": 0.5,
            "ok": True,
        },
    )
    llm.events.add(time_unix_nano=llm.start_time_unix_nano + 500_000, name="gen_ai.choice", attributes=kv({"index": 0}))
    tool = make_span(
        0xABC,
        3,
        parent=1,
        name="execute_tool sql",
        rollout="r-1",
        attempt="a-1",
        start_us=2500,
        duration_us=100,
        status=2,
    )
    tool.status.message = "syntax error"
    tool.links.add(trace_id=trace_id(0xDEF), span_id=span_id(9))
    request = make_request([root, llm, tool], service="sql-agent")
    request.resource_spans[0].resource.attributes.extend(kv({"host.name": "box-1"}))
    return request
