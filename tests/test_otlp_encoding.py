"""The fast OTLP encoder produces the same message as OpenTelemetry's; the exporters we build use it and nobody
else's exporters change."""

from __future__ import annotations

import math

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as otel_encode_spans
from opentelemetry.exporter.otlp.proto.grpc import trace_exporter as grpc_exporter
from opentelemetry.exporter.otlp.proto.http import trace_exporter as http_exporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, StatusCode

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


def test_long_arrays_become_the_same_wire_entries():
    field = otlp_encoding.encode_array_attribute("ids", TOKEN_IDS * 3)
    assert field is not None and field[:1] == b"\x4a"
    assert otlp_encoding.encode_array_attribute("mixed", [1, 2.0] * 10) is None
    assert otlp_encoding.encode_array_attribute("nulls", [1, None] * 10) is None
    assert otlp_encoding.encode_array_attribute("bools", [True] * 20) is None


def test_our_exporters_use_it(monkeypatch):
    lightning_otel.instrument()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    calls = []
    fast = otlp_encoding.encode_spans
    monkeypatch.setattr(otlp_exporters, "encode_spans", lambda spans: calls.append(len(spans)) or fast(spans))
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
