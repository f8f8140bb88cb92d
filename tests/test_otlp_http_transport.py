"""Our OTLP/HTTP exporters send to http:// collectors over one kept-alive connection (`otlp_http_transport`), with the
SDK's retries around it: a 503 with Retry-After is sent again, a connection the server dropped is reopened, and the
spans arrive intact."""

from __future__ import annotations

import socketserver
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lightning_otel.capture.otlp_exporters import FAST_HTTP, otlp_http_exporter

pytestmark = pytest.mark.skipif(not FAST_HTTP, reason="the exporter's transport parameter is 1.45's")


class ScriptedCollector(ThreadingHTTPServer):
    """Answers POST /v1/traces with the next scripted status (then 200), counting connections and span names."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.statuses: list[int] = []
        self.close_after_reply = False
        self.connections = 0
        self.requests: list[dict[str, str]] = []
        self.span_names: list[str] = []

    def get_request(self) -> tuple:
        self.connections += 1
        return super().get_request()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    server: ScriptedCollector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.server.requests.append({k.lower(): v for k, v in self.headers.items()})
        status = self.server.statuses.pop(0) if self.server.statuses else 200
        if status == 200:
            request = ExportTraceServiceRequest.FromString(body)
            self.server.span_names += [s.name for r in request.resource_spans for ss in r.scope_spans for s in ss.spans]
        self.send_response(status)
        if status == 503:
            self.send_header("RETRY-AFTER", "0")  # any case: the SDK reads it case-insensitively
        self.send_header("content-length", "0")
        if self.server.close_after_reply:
            self.send_header("connection", "close")
            self.close_connection = True
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[ScriptedCollector]:
    server = ScriptedCollector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def spans(*names: str) -> list[ReadableSpan]:
    memory, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for name in names:
        provider.get_tracer("test").start_span(name).end()
    return list(memory.get_finished_spans())


def test_exports_share_one_kept_connection_and_carry_the_headers(collector: ScriptedCollector) -> None:
    exporter = otlp_http_exporter(endpoint=collector.endpoint, auth_token="s3cret")
    for index in range(5):
        assert exporter.export(spans(f"span {index}")).name == "SUCCESS"
    assert collector.span_names == [f"span {index}" for index in range(5)]
    assert collector.connections == 1
    assert {r["authorization"] for r in collector.requests} == {"Bearer s3cret"}
    assert {r["content-type"] for r in collector.requests} == {"application/x-protobuf"}
    exporter.shutdown()


def test_a_503_is_sent_again_after_its_retry_after_and_a_closed_connection_is_reopened(
    collector: ScriptedCollector,
) -> None:
    exporter = otlp_http_exporter(endpoint=collector.endpoint)
    collector.statuses = [503, 503]
    began = time.monotonic()
    assert exporter.export(spans("after two 503s")).name == "SUCCESS"
    assert time.monotonic() - began < 0.9  # Retry-After: 0 was read (the SDK's own back-off waits 0.8-1.2 s, then 2x)
    assert collector.span_names == ["after two 503s"] and len(collector.requests) == 3
    collector.close_after_reply = True
    assert exporter.export(spans("one")).name == "SUCCESS"
    assert exporter.export(spans("two")).name == "SUCCESS"
    assert collector.span_names[-2:] == ["one", "two"] and collector.connections == 2
    exporter.shutdown()


def test_a_collector_that_is_gone_fails_the_export_without_raising() -> None:
    with socketserver.TCPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        port = closed.server_address[1]  # bound, then closed: nothing listens there
    exporter = otlp_http_exporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
    exporter._client._timeout = 0.5  # the SDK's retries back off within this bound
    assert exporter.export(spans("lost")).name == "FAILURE"
    exporter.shutdown()


def test_https_endpoints_keep_the_sdks_transport() -> None:
    from lightning_otel.capture.otlp_http_transport import KeptConnectionTransport

    assert not isinstance(otlp_http_exporter(endpoint="https://collector.invalid/v1/traces")._client._transport,
                          KeptConnectionTransport)  # fmt: skip
    assert isinstance(otlp_http_exporter(endpoint="http://127.0.0.1:1/v1/traces")._client._transport,
                      KeptConnectionTransport)  # fmt: skip


def test_a_forked_child_opens_its_own_connection(collector: ScriptedCollector) -> None:
    import os

    exporter = otlp_http_exporter(endpoint=collector.endpoint)
    assert exporter.export(spans("parent")).name == "SUCCESS"
    child = os.fork()
    if child == 0:  # the child: its export must not write into the parent's socket
        os._exit(0 if exporter.export(spans("child")).name == "SUCCESS" else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert exporter.export(spans("parent again")).name == "SUCCESS"
    assert collector.span_names == ["parent", "child", "parent again"] and collector.connections == 2
    exporter.shutdown()
