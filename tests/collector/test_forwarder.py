"""`--forward-otlp`: a destination that is down loses nothing and gets every span once when it comes up; a batch
refused with 400 is counted and skipped; a dead destination does not hold up a live one; gRPC destinations work."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from lightning_otel.testing.otlp_factory import make_span
from tests.collector.helpers import send, stored_ids, wait_for
from tests.helpers import free_port


def test_destination_down_then_up_receives_everything_once(start_collector) -> None:
    port = free_port()
    source = start_collector(forward_otlp=[f"http://127.0.0.1:{port}"])
    for b in range(5):
        send(source, [make_span(b + 1, s + 1, rollout=f"r{b}") for s in range(50)])
    time.sleep(1.0)  # the forwarder is retrying against a closed port
    metrics = httpx.get(source.addresses.query + "/metrics").text
    assert f'agl_collector_forward_batches_total{{destination="http://127.0.0.1:{port}",outcome="retried"}}' in metrics
    destination = start_collector(http_port=port, grpc_port=None)  # Jaeger comes up
    send(source, [make_span(99, 1)])  # and more arrives meanwhile
    wait_for(lambda: len(stored_ids(destination)) == 251)
    time.sleep(0.5)
    ids = stored_ids(destination)
    assert sorted(ids) == sorted(stored_ids(source))
    sent = httpx.get(source.addresses.query + "/metrics").text
    assert f'agl_collector_forward_spans_total{{destination="http://127.0.0.1:{port}",outcome="sent"}} 251.0' in sent


class _Refusing:
    """An OTLP/HTTP receiver that answers 400 to its first batch and 200 afterwards, recording what it got."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(ExportTraceServiceRequest.FromString(body))
                status = 400 if len(receiver.requests) == 1 else 200
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> int:
        return sum(len(ss.spans) for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans)


def test_rejected_batch_is_counted_and_skipped_and_dead_destination_does_not_block(start_collector) -> None:
    refusing = _Refusing()
    dead = f"http://127.0.0.1:{free_port()}"
    source = start_collector(forward_otlp=[dead, refusing.url])
    send(source, [make_span(1, s + 1) for s in range(10)])
    wait_for(lambda: len(refusing.requests) == 1)
    send(source, [make_span(2, s + 1) for s in range(10)])
    wait_for(lambda: len(refusing.requests) == 2)
    assert refusing.spans() == 20  # the refused batch was tried once and skipped; the next one went through
    metrics = httpx.get(source.addresses.query + "/metrics").text
    assert f'agl_collector_forward_batches_total{{destination="{refusing.url}",outcome="rejected"}} 1.0' in metrics
    assert f'agl_collector_forward_spans_total{{destination="{refusing.url}",outcome="sent"}} 10.0' in metrics
    refusing.server.shutdown()


def test_grpc_destination_and_persisted_cursor(start_collector, tmp_path) -> None:
    destination = start_collector()
    url = f"grpc://{destination.addresses.otlp_grpc}"
    store_url = f"sqlite:///{tmp_path}/source.sqlite3"
    source = start_collector(store_url=store_url, forward_otlp=[url])
    send(source, [make_span(5, s + 1) for s in range(30)])
    wait_for(lambda: len(stored_ids(destination)) == 30)
    last = max(s.seq for s in source.run(source.store.spans_after(0, 1000)))
    # the cursor is persisted after the destination acknowledged: wait for it, do not race it
    wait_for(lambda: source.run(source.store.get_cursor(f"forward:{url}")) == last)
    source.stop()  # a restarted source resumes from its cursor: nothing is sent twice
    restarted = start_collector(store_url=store_url, forward_otlp=[url])
    send(restarted, [make_span(6, 1)])
    wait_for(lambda: len(stored_ids(destination)) == 31)
    metrics = httpx.get(restarted.addresses.query + "/metrics").text
    assert f'agl_collector_forward_spans_total{{destination="{url}",outcome="sent"}} 1.0' in metrics
