"""Our OTLP encoder writes the same request OpenTelemetry's builds (every attribute kind, events, links, limits,
trace state, resources and scopes; hypothesis over attribute values); the exporters we build use it and nobody
else's exporters change."""

from __future__ import annotations

import math

import pytest
from google.protobuf.json_format import MessageToDict
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as otel_encode_spans
from opentelemetry.exporter.otlp.proto.grpc import trace_exporter as grpc_exporter
from opentelemetry.exporter.otlp.proto.http import trace_exporter as http_exporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

import lightning_otel
from lightning_otel.capture import otlp_encoding, otlp_exporters
from lightning_otel.capture.setup import build_exporter
from tests.otlp_receiver import OTLPReceiver

TOKEN_IDS = [0, 1, 127, 128, 16_383, 16_384, 151_643, 2**21 + 5, 2**40, -1, -(2**63)]


def _as_dict(request) -> dict:
    """The request as JSON, each span's attributes sorted (the fast encoder appends long arrays last)."""
    message = MessageToDict(request)
    for resource_spans in message.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                span["attributes"] = sorted(span.get("attributes", []), key=lambda kv: kv["key"])
    return message


def _finished_spans(limits: SpanLimits | None = None):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "enc"}), span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("a")
    other_scope = provider.get_tracer("b", "2.0")
    with tracer.start_as_current_span("parent") as parent:
        with tracer.start_as_current_span("chat m", kind=SpanKind.CLIENT) as span:
            span.set_attributes(
                {
                    "ids": TOKEN_IDS * 5,
                    "logprobs": [-0.5, 0.0, -1e-300, -math.inf, 3.25] * 10,
                    "flags": [True, False] * 20,
                    "words": ["a", "b"] * 20,
                    "short": [1, 2, 3],
                    "name": "x",
                    "count": 3,
                }
            )
            span.add_event("e", {"k": [1.5] * 20})
            span.set_status(StatusCode.ERROR, "bad")
        other = other_scope.start_span("tool", links=[Link(parent.get_span_context(), {"w": 1})])
        other.set_attribute("ids", list(range(100)))
        other.end()
    return exporter.get_finished_spans()


def test_same_message_as_opentelemetry_for_every_attribute_kind():
    spans = _finished_spans()
    fast = otlp_encoding.encode_spans(spans)
    assert _as_dict(fast) == _as_dict(otel_encode_spans(spans))
    assert fast.SerializeToString()  # a well-formed message


def test_dropped_counts_survive():
    spans = _finished_spans(SpanLimits(max_span_attributes=4, max_events=0, max_links=0))
    assert any(span.dropped_attributes for span in spans)
    assert _as_dict(otlp_encoding.encode_spans(spans)) == _as_dict(otel_encode_spans(spans))


def test_our_exporters_use_it(monkeypatch):
    lightning_otel.instrument()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    calls = []
    fast = otlp_encoding.encode_request
    monkeypatch.setattr(otlp_exporters, "encode_request", lambda spans: calls.append(len(spans)) or fast(spans))
    with OTLPReceiver() as receiver:
        exporter = build_exporter(endpoint=receiver.endpoint)
        assert isinstance(exporter, otlp_exporters.FastHTTPSpanExporter)
        spans = _finished_spans()
        assert exporter.export(spans).name == "SUCCESS"
        received = {span["name"]: span for span in receiver.spans}
    assert calls == [len(spans)]
    assert received["chat m"]["attributes"]["ids"] == TOKEN_IDS * 5
    assert received["chat m"]["attributes"]["logprobs"][:4] == [-0.5, 0.0, -1e-300, -math.inf]
    assert received["chat m"]["attributes"]["flags"] == [True, False] * 20
    assert received["tool"]["attributes"]["ids"] == list(range(100))
    grpc = otlp_exporters.otlp_grpc_exporter("http://127.0.0.1:9")
    assert _as_dict(grpc._translate_data(spans)) == _as_dict(otel_encode_spans(spans))


def test_a_users_own_exporter_sends_exactly_the_sdks_bytes(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    lightning_otel.instrument()
    with OTLPReceiver() as receiver:
        build_exporter(endpoint=receiver.endpoint)  # ours exists in the same process
        users = http_exporter.OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")
        spans = _finished_spans()
        assert users.export(spans).name == "SUCCESS"
        (body,) = receiver.bodies
    assert body == otel_encode_spans(spans).SerializePartialToString()
    assert http_exporter.encode_spans is otel_encode_spans
    assert grpc_exporter.encode_spans is otel_encode_spans
    assert grpc_exporter.OTLPSpanExporter._translate_data(None, spans) == otel_encode_spans(spans)  # type: ignore[arg-type]


def test_our_http_exporter_reports_a_refused_batch_as_the_sdk_does():
    """A 400 from the receiver (not retryable): FAILURE at once, as the SDK's own exporter answers."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        ours = otlp_exporters.otlp_http_exporter(endpoint)
        sdk = http_exporter.OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")
        spans = _finished_spans()
        assert ours.export(spans).name == sdk.export(spans).name == "FAILURE"
    finally:
        server.shutdown()
        server.server_close()


def _request_dict(spans) -> dict:
    return MessageToDict(ExportTraceServiceRequest.FromString(otlp_encoding.encode_request(spans)))


def test_the_same_request_for_spans_of_every_shape() -> None:
    """Two resources and three scopes (one with a schema URL and attributes), a remote parent, trace state, links
    with and without attributes, events with dropped attributes, statuses, every kind, a span with no attribute."""
    exporter = InMemorySpanExporter()
    for service in ("one", "two"):
        provider = TracerProvider(resource=Resource.create({"service.name": service}, schema_url="https://s/1"),
                                  span_limits=SpanLimits(max_event_attributes=1))  # fmt: skip
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracers = [provider.get_tracer("a"), provider.get_tracer("b", "2.0", "https://s/2", {"scope.k": [1, 2]})]
        remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1),
                             trace_state=TraceState([("vendor", "v1"), ("other", "x")]))  # fmt: skip
        for index, kind in enumerate(SpanKind):
            tracer = tracers[index % 2]
            span = tracer.start_span(f"op {kind.name}", context=set_span_in_context(NonRecordingSpan(remote)),
                                     kind=kind, links=[Link(remote, {"w": 1.5}), Link(remote)])  # fmt: skip
            span.add_event("e", {"a": 1, "b": "dropped by the limit"}, timestamp=123)
            span.add_event("")
            if index % 3 == 1:
                span.set_status(StatusCode.ERROR, "bad input")
            elif index % 3 == 2:
                span.set_status(StatusCode.OK)
            span.end()
        provider.get_tracer("", None).start_span("").end()  # an empty name and scope name
    spans = exporter.get_finished_spans()
    assert _request_dict(spans) == MessageToDict(otel_encode_spans(spans))


scalars = st.one_of(
    st.text(max_size=20),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.binary(max_size=10),
)
attribute_values = st.one_of(
    scalars,
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40),
    st.lists(st.floats(allow_nan=False), max_size=40),
    st.lists(st.one_of(st.text(max_size=5), st.booleans(), st.none()), max_size=20),
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=10), attribute_values, max_size=12))
def test_any_attributes_encode_to_the_same_request(attributes: dict) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "p"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("t").start_span("s")
    span._attributes._dict.update(attributes)  # past the SDK's validation: the encoder must take what it holds
    span.end()
    spans = exporter.get_finished_spans()
    assert _request_dict(spans) == MessageToDict(otel_encode_spans(spans))


def test_what_otlp_cannot_carry_is_dropped_as_opentelemetry_drops_it(caplog: pytest.LogCaptureFixture) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "p"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("t").start_span("s")
    odd = {"too big": 2**64, "too big in a list": [1, 2**64] * 10, "an object": object(), "kept": "yes",
           "a map": {"k": [1, 2], 3: "three"}, "lone surrogate": "\ud800"}  # fmt: skip
    span._attributes._dict.update(odd)
    span.end()
    spans = exporter.get_finished_spans()
    ours = _request_dict(spans)
    assert ours == MessageToDict(otel_encode_spans(spans))
    kept = [kv["key"] for kv in ours["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]]
    assert "kept" in kept and "a map" in kept and "too big" not in kept and "an object" not in kept
    assert "Failed to encode key too big" in caplog.text
