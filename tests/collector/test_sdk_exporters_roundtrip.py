"""The real OpenTelemetry SDK exporters (OTLP/HTTP and OTLP/gRPC) deliver 10k spans to the collector, and what the
query API returns equals, field by field, what the SDK encoded: attributes of every type, events, links, status."""

from __future__ import annotations

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from lightning_otel.collector.receiving.json_decoding import request_from_json

TRACES, SPANS_PER_TRACE = 100, 100  # 10,000 spans


def _exporter(collector, protocol: str):
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=collector.addresses.otlp_grpc, insecure=True)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=collector.addresses.otlp_http + "/v1/traces")


def _emit(provider: TracerProvider) -> None:
    tracer = provider.get_tracer("roundtrip", "1.2.3")
    previous = None
    for t in range(TRACES):
        with tracer.start_as_current_span(f"invoke_agent a{t % 3}", attributes={"agl.rollout.id": f"r{t}"}) as root:
            for s in range(SPANS_PER_TRACE - 1):
                links = [Link(previous, {"link.n": s})] if previous is not None and s == 0 else []
                with tracer.start_as_current_span(
                    f"chat m{s % 5}",
                    kind=SpanKind.CLIENT if s % 2 else SpanKind.INTERNAL,
                    links=links,
                    attributes={
                        "agl.rollout.id": f"r{t}",
                        "agl.attempt.id": "a1",
                        "gen_ai.agent.name": f"a{t % 3}",
                        "agl.llm.prompt_token_ids": list(range(s, s + 20)),
                        "agl.llm.response_logprobs": [-0.5, -1.25],
                        "flag": s % 2 == 0,
                        "big": 2**62 + s,
                        "ratio": s / 7,
                        "tags": ["x", "y"],
                        "unicode": "héllo ✓",
                    },
                ) as span:
                    span.add_event("token", {"index": s, "text": "tok"})
                    if s % 10 == 9:
                        span.set_status(Status(StatusCode.ERROR, "failed on purpose"))
            previous = root.get_span_context()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ten_thousand_spans_round_trip_exactly(start_collector, protocol: str) -> None:
    collector = start_collector()
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": f"rt-{protocol}", "host.name": "h1"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(
        BatchSpanProcessor(_exporter(collector, protocol), max_export_batch_size=512, max_queue_size=20_000)
    )
    _emit(provider)
    assert provider.force_flush(60_000)
    provider.shutdown()
    finished = memory.get_finished_spans()
    assert len(finished) == TRACES * SPANS_PER_TRACE

    expected = {}
    for resource_spans in encode_spans(finished).resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                expected[(span.trace_id, span.span_id)] = (span, resource_spans.resource, scope_spans.scope)

    received = {}
    trace_ids = {format(s.context.trace_id, "032x") for s in finished}
    with httpx.Client(base_url=collector.addresses.query, timeout=30) as client:
        for trace_hex in trace_ids:
            response = client.get(f"/api/v3/traces/{trace_hex}")
            assert response.status_code == 200
            request = request_from_json(response.json()["result"])
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        received[(span.trace_id, span.span_id)] = (span, resource_spans.resource, scope_spans.scope)
    assert received.keys() == expected.keys()
    for key, (span, resource, scope) in expected.items():
        got_span, got_resource, got_scope = received[key]
        assert got_span == span
        assert got_resource == resource
        assert (got_scope.name, got_scope.version) == (scope.name, scope.version)
    assert collector.run(collector.store.span_count()) == TRACES * SPANS_PER_TRACE
    assert trace.get_tracer_provider() is not provider  # the test never touched the global provider
