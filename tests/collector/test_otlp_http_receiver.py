"""OTLP/HTTP conformance: every status code path, JSON/protobuf/gzip, partial success, auth, overload."""

from __future__ import annotations

import gzip
import json
import socket

import httpx
import pytest
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from lightning_otel.testing.otlp_factory import kv, make_request, make_span, span_id, trace_id
from tests.collector.helpers import PB

JS = {"content-type": "application/json"}


def stored(collector, trace: int | bytes) -> list[Span]:
    spans = collector.run(collector.store.trace_spans(trace if isinstance(trace, bytes) else trace_id(trace)))
    return [Span.FromString(s.span_bytes) for s in spans]


@pytest.fixture
def collector(start_collector):
    return start_collector(max_body_bytes=1 << 20)


def url(collector) -> str:
    return collector.addresses.otlp_http + "/v1/traces"


def test_protobuf_is_acknowledged_in_protobuf_after_commit(collector) -> None:
    body = make_request([make_span(1, 1, rollout="r1"), make_span(1, 2, parent=1, rollout="r1")]).SerializeToString()
    response = httpx.post(url(collector), content=body, headers=PB)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-protobuf"
    assert not ExportTraceServiceResponse.FromString(response.content).HasField("partial_success")
    assert len(stored(collector, 1)) == 2  # committed before the reply


def test_json_uppercase_hex_ids_enum_names_unknown_fields_snake_case(collector) -> None:
    document = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-svc"}}]},
                "futureField": {"ignored": True},
                "scopeSpans": [
                    {
                        "scope": {"name": "s"},
                        "spans": [
                            {
                                "traceId": "0102030405060708090A0B0C0D0E0F10",
                                "spanId": "A1A2A3A4A5A6A7A8",
                                "parentSpanId": "",
                                "name": "chat m",
                                "kind": "SPAN_KIND_CLIENT",
                                "startTimeUnixNano": "1790000000000000000",
                                "end_time_unix_nano": 1790000000001000000,
                                "attributes": [
                                    {"key": "agl.rollout.id", "value": {"stringValue": "r-json"}},
                                    {
                                        "key": "agl.llm.prompt_token_ids",
                                        "value": {
                                            "arrayValue": {"values": [{"intValue": "151644"}, {"intValue": 8948}]}
                                        },
                                    },
                                    {"key": "p", "value": {"doubleValue": "NaN"}},
                                ],
                                "status": {"code": 2, "message": "boom"},
                                "somethingNew": 1,
                            }
                        ],
                    }
                ],
            }
        ]
    }
    response = httpx.post(url(collector), content=json.dumps(document), headers=JS)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {}
    spans = collector.run(collector.store.trace_spans(bytes.fromhex("0102030405060708090a0b0c0d0e0f10")))
    (span,) = [Span.FromString(s.span_bytes) for s in spans]
    assert span.span_id == bytes.fromhex("a1a2a3a4a5a6a7a8")
    assert span.kind == 3 and span.status.code == 2 and span.end_time_unix_nano == 1790000000001000000
    assert [v.int_value for v in span.attributes[1].value.array_value.values] == [151644, 8948]
    assert spans[0].service_name == "json-svc"


@pytest.mark.parametrize("as_json", [False, True])
def test_gzip_bodies(collector, as_json: bool) -> None:
    request = make_request([make_span(3, 1)])
    if as_json:
        raw = json.dumps(
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {"spans": [{"traceId": trace_id(3).hex(), "spanId": "0000000000000001", "name": "op"}]}
                        ]
                    }
                ]
            }
        ).encode()
    else:
        raw = request.SerializeToString()
    response = httpx.post(
        url(collector), content=gzip.compress(raw), headers={**(JS if as_json else PB), "content-encoding": "gzip"}
    )
    assert response.status_code == 200, response.text
    assert len(stored(collector, 3)) == 1


def test_gzip_bomb_is_stopped_while_inflating(collector) -> None:
    bomb = gzip.compress(b"\0" * (64 << 20))  # 64 MiB of zeros in ~64 KiB, limit is 1 MiB
    response = httpx.post(url(collector), content=bomb, headers={**PB, "content-encoding": "gzip"})
    assert response.status_code == 413
    assert "exceeds" in RpcStatus.FromString(response.content).message
    assert (
        httpx.post(url(collector), content=make_request([make_span(4, 1)]).SerializeToString(), headers=PB).status_code
        == 200
    )  # still serving


def test_declared_body_over_limit_is_413(collector) -> None:
    response = httpx.post(url(collector), content=b"\0" * ((1 << 20) + 1), headers=JS)
    assert response.status_code == 413
    assert response.json()["code"] == 8


def test_unsupported_content_type_and_encoding_are_415(collector) -> None:
    response = httpx.post(url(collector), content=b"x", headers={"content-type": "text/plain"})
    assert response.status_code == 415 and "application/x-protobuf" in response.json()["message"]
    response = httpx.post(url(collector), content=b"x", headers={**PB, "content-encoding": "br"})
    assert response.status_code == 415


def test_other_methods_are_405(collector) -> None:
    assert httpx.get(url(collector)).status_code == 405
    assert httpx.put(url(collector), content=b"", headers=PB).status_code == 405


def test_undecodable_bodies_are_400_with_rpc_status(collector) -> None:
    response = httpx.post(url(collector), content=b"\xff\xff\xff\xff", headers=PB)
    assert response.status_code == 400
    assert RpcStatus.FromString(response.content).code == 3
    response = httpx.post(url(collector), content=b"{not json", headers=JS)
    assert response.status_code == 400 and "invalid JSON" in response.json()["message"]
    response = httpx.post(url(collector), content=b'{"resourceSpans": 5}', headers=JS)
    assert response.status_code == 400
    response = httpx.post(url(collector), content=gzip.compress(b"x")[:-4], headers={**PB, "content-encoding": "gzip"})
    assert response.status_code == 400


def test_bad_ids_are_rejected_one_by_one_in_partial_success(collector) -> None:
    good = {"traceId": trace_id(5).hex(), "spanId": "00000000000000aa", "name": "good"}
    short = {"traceId": "abcd", "spanId": "00000000000000bb", "name": "short-trace"}
    zero = {"traceId": "0" * 32, "spanId": "00000000000000cc", "name": "zero"}
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [good, short, zero]}]}]}
    response = httpx.post(url(collector), content=json.dumps(document), headers=JS)
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "2"
    assert "short-trace" in partial["errorMessage"] and "zero" in partial["errorMessage"]
    assert [s.name for s in stored(collector, 5)] == ["good"]
    bad = make_request([make_span(6, 1), Span(trace_id=trace_id(6), span_id=b"\1\2", name="short-span")])
    response = httpx.post(url(collector), content=bad.SerializeToString(), headers=PB)
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 1 and "span_id must be 8" in partial.error_message


def test_empty_requests_succeed(collector) -> None:
    assert httpx.post(url(collector), content=b"", headers=PB).status_code == 200
    response = httpx.post(url(collector), content=b"{}", headers=JS)
    assert (response.status_code, response.json()) == (200, {})


def test_spans_without_rollout_are_stored_and_counted(collector) -> None:
    body = make_request([make_span(8, 1), make_span(8, 2, rollout="r8")]).SerializeToString()
    assert httpx.post(url(collector), content=body, headers=PB).status_code == 200
    assert httpx.post(url(collector), content=body, headers=PB).status_code == 200  # resent: deduplicated
    assert len(stored(collector, 8)) == 2
    metrics = httpx.get(collector.addresses.query + "/metrics").text
    assert "agl_collector_spans_without_rollout_total 2.0" in metrics
    assert "agl_collector_spans_duplicate_total 2.0" in metrics


def test_bearer_token_is_checked_everywhere_but_healthz(start_collector) -> None:
    collector = start_collector(auth_token="s3cret")
    body = make_request([make_span(9, 1)]).SerializeToString()
    assert httpx.post(url(collector), content=body, headers=PB).status_code == 401
    assert httpx.post(url(collector), content=body, headers={**PB, "authorization": "Bearer wrong"}).status_code == 401
    assert httpx.post(url(collector), content=body, headers={**PB, "authorization": "Bearer s3cret"}).status_code == 200
    query = collector.addresses.query
    assert httpx.get(query + "/api/services").status_code == 401
    assert httpx.get(query + "/api/services", headers={"authorization": "Bearer s3cret"}).json()["data"] == ["svc"]
    assert httpx.get(query + "/healthz").status_code == 200


def _hold_request_open(address: str, declared: int) -> socket.socket:
    """Send headers and part of a body, then stall: the request holds its in-flight budget."""
    host, port = address.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        f"Content-Length: {declared}\r\n\r\n".encode()
        + b"\0" * 10
    )
    return sock


def test_overload_answers_503_with_retry_after_before_decoding(start_collector) -> None:
    collector = start_collector(max_in_flight_bytes=10_000)
    held = _hold_request_open(collector.addresses.otlp_http, 9_000)
    try:
        for _ in range(100):  # wait until the held request is admitted
            if "agl_collector_in_flight_bytes 9000.0" in httpx.get(collector.addresses.query + "/metrics").text:
                break
        body = make_request([make_span(10, s) for s in range(1, 200)]).SerializeToString()
        response = httpx.post(url(collector), content=body, headers=PB)
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1"
        assert RpcStatus.FromString(response.content).code == 14
    finally:
        held.close()
    for _ in range(100):
        response = httpx.post(url(collector), content=body, headers=PB)
        if response.status_code == 200:
            break
    assert response.status_code == 200  # the budget is released when the stalled client goes away
    metrics = httpx.get(collector.addresses.query + "/metrics").text
    assert 'agl_collector_requests_total{outcome="client_disconnected",transport="http"} 1.0' in metrics


def test_a_process_whose_resource_names_the_rollout_has_all_its_spans_in_it(collector) -> None:
    # a harness started by lightning_otel.harness_env: OTEL_RESOURCE_ATTRIBUTES=agl.rollout.id=...,agl.attempt.id=...
    request = make_request([make_span(9, 1), make_span(9, 2, rollout="own-rollout")])
    request.resource_spans[0].resource.attributes.extend(kv({"agl.rollout.id": "r9", "agl.attempt.id": "a9"}))
    assert httpx.post(url(collector), content=request.SerializeToString(), headers=PB).status_code == 200
    in_rollout = collector.run(collector.store.rollout_spans("r9", "a9"))
    assert [Span.FromString(s.span_bytes).span_id for s in in_rollout] == [span_id(1)]
    own = collector.run(collector.store.rollout_spans("own-rollout"))
    assert [Span.FromString(s.span_bytes).span_id for s in own] == [span_id(2)]  # the span's own attribute wins
    assert "agl_collector_spans_without_rollout_total 0.0" in httpx.get(collector.addresses.query + "/metrics").text
