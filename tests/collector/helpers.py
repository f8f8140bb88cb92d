"""Small helpers shared by the collector tests."""

from __future__ import annotations

import time

import httpx

from tests.collector.otlp_factory import make_request

PB = {"content-type": "application/x-protobuf"}


def send(collector, spans) -> None:
    body = make_request(spans).SerializeToString()
    assert httpx.post(collector.addresses.otlp_http + "/v1/traces", content=body, headers=PB).status_code == 200


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def stored_ids(collector) -> list[tuple[bytes, bytes]]:
    spans = collector.run(collector.store.spans_after(0, 100_000))
    return [(s.trace_id, s.span_id) for s in spans]
