"""OTLP/gRPC conformance: success, partial success, bad input, auth, overload with RetryInfo; and transient store
errors (a real PostgreSQL cluster stopped under the collector) answered 503 / UNAVAILABLE, then recovered."""

from __future__ import annotations

import socket

import grpc
import httpx
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from lightning_otel.testing.otlp_factory import make_request, make_span, trace_id

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def export(collector, body: bytes, metadata: tuple = ()) -> ExportTraceServiceResponse:
    with grpc.insecure_channel(collector.addresses.otlp_grpc) as channel:
        call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        return ExportTraceServiceResponse.FromString(call(body, timeout=10, metadata=metadata))


def test_export_commits_then_acknowledges(start_collector) -> None:
    collector = start_collector()
    response = export(collector, make_request([make_span(1, 1, rollout="g"), make_span(1, 2)]).SerializeToString())
    assert not response.HasField("partial_success")
    assert len(collector.run(collector.store.trace_spans(trace_id(1)))) == 2


def test_partial_success_for_bad_ids(start_collector) -> None:
    collector = start_collector()
    body = make_request([make_span(2, 1), Span(trace_id=b"\1" * 3, span_id=b"\1" * 8, name="bad")])
    response = export(collector, body.SerializeToString())
    assert response.partial_success.rejected_spans == 1
    assert "trace_id must be 16" in response.partial_success.error_message


def test_garbage_is_invalid_argument(start_collector) -> None:
    collector = start_collector()
    with pytest.raises(grpc.RpcError) as error:
        export(collector, b"\xff\xff\xff")
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_bearer_token_in_metadata(start_collector) -> None:
    collector = start_collector(auth_token="tok")
    body = make_request([make_span(3, 1)]).SerializeToString()
    with pytest.raises(grpc.RpcError) as error:
        export(collector, body)
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    export(collector, body, metadata=(("authorization", "Bearer tok"),))


def _retry_delay_s(error: grpc.RpcError) -> float:
    for key, value in error.trailing_metadata():
        if key == "grpc-status-details-bin":
            info = RetryInfo()
            assert RpcStatus.FromString(value).details[0].Unpack(info)
            return info.retry_delay.seconds
    raise AssertionError("no RetryInfo")


def test_overload_is_unavailable_with_retry_info(start_collector) -> None:
    collector = start_collector(max_in_flight_bytes=5_000)
    host, port = collector.addresses.otlp_http.removeprefix("http://").rsplit(":", 1)
    held = socket.create_connection((host, int(port)))  # an HTTP export that stalls mid-body holds the budget
    held.sendall(
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        b"Content-Length: 4900\r\n\r\n" + b"\0" * 10
    )
    try:
        for _ in range(100):
            if "agl_collector_in_flight_bytes 4900.0" in httpx.get(collector.addresses.query + "/metrics").text:
                break
        with pytest.raises(grpc.RpcError) as error:
            export(collector, make_request([make_span(4, s) for s in range(1, 100)]).SerializeToString())
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE
        assert _retry_delay_s(error.value) == 1
    finally:
        held.close()


def test_store_outage_is_503_and_unavailable_then_recovers(start_collector, tmp_path) -> None:
    from lightning_otel.testing.pg_cluster import ThrowawayPostgres, find_pg_bin

    if find_pg_bin() is None:  # never a quiet skip: the README's test command installs them first
        pytest.fail("PostgreSQL server binaries missing: run `bash .ci/prerequisites` (apt-get install postgresql)")
    cluster = ThrowawayPostgres().start()
    try:
        collector = start_collector(store_url=cluster.url())
        body = make_request([make_span(5, 1)]).SerializeToString()
        http_url = collector.addresses.otlp_http + "/v1/traces"
        headers = {"content-type": "application/x-protobuf"}
        assert httpx.post(http_url, content=body, headers=headers).status_code == 200
        cluster.stop()
        response = httpx.post(http_url, content=make_request([make_span(5, 2)]).SerializeToString(), headers=headers)
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert "PostgreSQL write failed" in RpcStatus.FromString(response.content).message
        with pytest.raises(grpc.RpcError) as error:
            export(collector, make_request([make_span(5, 3)]).SerializeToString())
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE
        cluster.start_again()
        for _ in range(50):  # the writer reconnects on the next write
            response = httpx.post(
                http_url, content=make_request([make_span(5, 2)]).SerializeToString(), headers=headers
            )
            if response.status_code == 200:
                break
        assert response.status_code == 200
        assert len(collector.run(collector.store.trace_spans(trace_id(5)))) == 2
    finally:
        cluster.destroy()
