"""OTLP/gRPC receiver: `opentelemetry.proto.collector.trace.v1.TraceService/Export` and
`opentelemetry.proto.collector.logs.v1.LogsService/Export` (64 MiB receive limit).

Overload and transient store errors answer UNAVAILABLE with a `google.rpc.RetryInfo` in the status details, so
OTLP exporters back off and retry; a missing bearer token in the `authorization` metadata is UNAUTHENTICATED.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from lightning_otel.collector.auth import bearer_ok
from lightning_otel.collector.receiving.http_receiver import RETRY_AFTER_S
from lightning_otel.collector.receiving.ingest import Ingestor, IngestResult, Overloaded
from lightning_otel.collector.receiving.log_records import decode_logs_protobuf
from lightning_otel.collector.receiving.otlp_decoding import DecodeError, decode_protobuf
from lightning_otel.collector.stores.store import TransientStoreError
from lightning_otel.collector.tcp_listener import listening_socket

MAX_RECEIVE_BYTES = 64 * 1024 * 1024
SERVICE_NAME = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE_NAME = "opentelemetry.proto.collector.logs.v1.LogsService"


def _retry_details(message: str) -> bytes:
    detail = AnyProto()
    detail.Pack(RetryInfo(retry_delay=Duration(seconds=RETRY_AFTER_S)))
    return RpcStatus(code=grpc.StatusCode.UNAVAILABLE.value[0], message=message, details=[detail]).SerializeToString()


class TraceService:
    """`TraceService/Export` on raw bytes, so admission happens before the request is decoded (`LogsService`: the
    same for log records)."""

    service_name = SERVICE_NAME

    def __init__(self, ingestor: Ingestor, auth_token: str | None) -> None:
        self.ingestor = ingestor
        self.auth_token = auth_token

    def decode(self, body: bytes) -> Any:
        return decode_protobuf(body)

    async def ingest(self, decoded: Any) -> IngestResult:
        return await self.ingestor.ingest(decoded)

    def respond(self, result: IngestResult) -> Any:
        response = ExportTraceServiceResponse()
        if result.rejected:
            response.partial_success.CopyFrom(
                ExportTracePartialSuccess(rejected_spans=result.rejected, error_message=result.error_message)
            )
        return response

    async def export(self, body: bytes, context: grpc.aio.ServicerContext) -> Any:
        metrics = self.ingestor.metrics
        metadata = dict(context.invocation_metadata() or ())
        if not bearer_ok(metadata.get("authorization"), self.auth_token):
            metrics.requests.labels("grpc", "unauthorized").inc()
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        try:
            release = self.ingestor.admit(max(len(body), 1))
        except Overloaded as exc:
            metrics.requests.labels("grpc", "overloaded").inc()
            await self._unavailable(context, str(exc))
        try:
            try:
                decoded = self.decode(body)
            except DecodeError as exc:
                metrics.requests.labels("grpc", "bad_request").inc()
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            try:
                result = await self.ingest(decoded)
            except TransientStoreError as exc:
                metrics.requests.labels("grpc", "store_unavailable").inc()
                await self._unavailable(context, str(exc))
        finally:
            release()
        metrics.requests.labels("grpc", "ok").inc()
        return self.respond(result)

    @staticmethod
    async def _unavailable(context: grpc.aio.ServicerContext, message: str) -> None:
        context.set_trailing_metadata((("grpc-status-details-bin", _retry_details(message)),))
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    def handler(self) -> grpc.GenericRpcHandler:
        method = grpc.unary_unary_rpc_method_handler(
            self.export, request_deserializer=None, response_serializer=lambda response: response.SerializeToString()
        )
        return grpc.method_handlers_generic_handler(self.service_name, {"Export": method})


class LogsService(TraceService):
    """`LogsService/Export`: log records, received as spans are."""

    service_name = LOGS_SERVICE_NAME

    def decode(self, body: bytes) -> Any:
        return decode_logs_protobuf(body)

    async def ingest(self, decoded: Any) -> IngestResult:
        return await self.ingestor.ingest_logs(decoded)

    def respond(self, result: IngestResult) -> Any:
        response = ExportLogsServiceResponse()
        if result.rejected:
            response.partial_success.CopyFrom(
                ExportLogsPartialSuccess(rejected_log_records=result.rejected, error_message=result.error_message)
            )
        return response


def build_grpc_server(
    ingestor: Ingestor, address: str, *, auth_token: str | None = None
) -> tuple[grpc.aio.Server, int]:
    """A started-later aio server bound to `address` (`host:port`, port 0 picks one); returns it and the port."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
            ("grpc.so_reuseport", 0),
        ]
    )
    server.add_generic_rpc_handlers(
        (TraceService(ingestor, auth_token).handler(), LogsService(ingestor, auth_token).handler())
    )
    host, _, wanted = address.rpartition(":")
    if int(wanted):  # taken? said in one line here, before gRPC's core logs its own error
        listening_socket(host.strip("[]"), int(wanted)).close()
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpcio raises when the address is taken or unavailable
        raise OSError(f"cannot listen on {address} (OTLP/gRPC): address in use or not available ({exc})") from None
    if port == 0:
        raise OSError(f"cannot listen on {address} (OTLP/gRPC): address in use or not available")
    return server, port
