"""OTLP/HTTP receiver: `POST /v1/traces` and `POST /v1/logs`, protobuf or JSON, optionally gzip; replies in the
request's type.

Status codes follow the OTLP specification: 400 (+ `google.rpc.Status`) for undecodable bodies, 413 over the size
limit (checked after decompression, inflating in bounded steps so a gzip bomb stops early), 415 for unknown
content types or encodings, 405 for other methods, 401 without the bearer token, 503 + `Retry-After` when the
in-flight budget is spent or the store has a transient error (never 500 for overload), and 200 with
`partial_success` when some spans (log records) were rejected.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from lightning_otel.collector.auth import bearer_ok
from lightning_otel.collector.receiving.ingest import Ingestor, IngestResult, Overloaded
from lightning_otel.collector.receiving.json_decoding import decode_json
from lightning_otel.collector.receiving.log_records import decode_logs_json, decode_logs_protobuf
from lightning_otel.collector.receiving.otlp_decoding import DecodeError, decode_protobuf
from lightning_otel.collector.stores.store import TransientStoreError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
RETRY_AFTER_S = 1


class BodyTooLarge(ValueError):
    pass


def _rpc_status(code: int, message: str, as_json: bool) -> tuple[bytes, str]:
    if as_json:
        return json.dumps({"code": code, "message": message}).encode(), JSON
    return RpcStatus(code=code, message=message).SerializeToString(), PROTOBUF


def _error(http_status: int, grpc_code: int, message: str, as_json: bool, retry: bool = False) -> Response:
    body, media_type = _rpc_status(grpc_code, message, as_json)
    headers = {"Retry-After": str(RETRY_AFTER_S)} if retry else None
    return Response(body, status_code=http_status, media_type=media_type, headers=headers)


def inflate(body: bytes, limit: int) -> bytes:
    """gunzip every member (RFC 1952 allows several, concatenated) in bounded steps: stop as soon as the output
    would pass `limit` (gzip bombs never expand). Bytes after the last member that are not a member are an error."""
    chunks, size = [], 0
    data = body
    while data:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        while data:
            chunk = inflater.decompress(data, 1 << 20)
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(f"decompressed body exceeds {limit} bytes")
            chunks.append(chunk)
            data = inflater.unconsumed_tail
            if inflater.eof:
                break
        if not inflater.eof:
            raise zlib.error("truncated gzip stream")
        rest = inflater.flush()
        size += len(rest)
        if size > limit:
            raise BodyTooLarge(f"decompressed body exceeds {limit} bytes")
        chunks.append(rest)
        data = inflater.unused_data  # the next member, if any
    return b"".join(chunks)


async def drain(request: Request, limit: int) -> None:
    """Read and drop the body before an early answer (401, 415, 503): a server that answers and closes while the
    client is still sending resets the connection, and the client sees a reset instead of the answer."""
    read = 0
    try:
        async for chunk in request.stream():
            read += len(chunk)
            if read > limit:
                return  # not worth reading on: this client will see a reset
    except ClientDisconnect:
        return


@dataclass(frozen=True, slots=True)
class _Signal:
    """What differs between traces and logs: how a body decodes, where it is stored, how success is answered."""

    decode_protobuf: Callable[[bytes], Any]
    decode_json: Callable[[bytes], Any]
    ingest: Callable[[Any], Awaitable[IngestResult]]
    success: Callable[[int, str, bool], Response]


def build_otlp_app(
    ingestor: Ingestor, *, auth_token: str | None = None, max_body_bytes: int = 64 * 1024 * 1024
) -> Starlette:
    metrics = ingestor.metrics
    traces = _Signal(decode_protobuf, decode_json, ingestor.ingest, _success)
    logs = _Signal(decode_logs_protobuf, decode_logs_json, ingestor.ingest_logs, _logs_success)

    def route(signal: _Signal) -> Callable[[Request], Awaitable[Response]]:
        async def export(request: Request) -> Response:
            return await _export(request, signal)

        return export

    async def _export(request: Request, signal: _Signal) -> Response:
        media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        as_json = media_type == JSON
        if not bearer_ok(request.headers.get("authorization"), auth_token):
            metrics.requests.labels("http", "unauthorized").inc()
            await drain(request, max_body_bytes)
            return _error(401, 16, "missing or wrong bearer token", as_json)
        if media_type not in (PROTOBUF, JSON):
            metrics.requests.labels("http", "unsupported").inc()
            await drain(request, max_body_bytes)
            return _error(
                415, 3, f"unsupported content type {media_type or '(none)'!r}; use {PROTOBUF} or {JSON}", as_json=True
            )
        encoding = request.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("identity", "gzip"):
            metrics.requests.labels("http", "unsupported").inc()
            await drain(request, max_body_bytes)
            return _error(415, 3, f"unsupported content encoding {encoding!r}; use gzip or none", as_json)
        try:
            declared = int(request.headers.get("content-length") or 0)  # 0 if chunked: limited while read
        except ValueError:
            return _error(400, 3, "invalid Content-Length", as_json)
        if declared > max_body_bytes:
            metrics.requests.labels("http", "too_large").inc()
            return _error(413, 8, f"body of {declared} bytes exceeds the limit of {max_body_bytes}", as_json)
        try:
            release = ingestor.admit(max(declared, 1))
        except Overloaded as exc:
            metrics.requests.labels("http", "overloaded").inc()
            await drain(request, max_body_bytes)  # dropped as read: overload costs no memory
            return _error(503, 14, str(exc), as_json, retry=True)
        try:
            chunks, size = [], 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_body_bytes:
                    raise BodyTooLarge(f"body exceeds the limit of {max_body_bytes} bytes")
                chunks.append(chunk)
            body = b"".join(chunks)
            if encoding == "gzip":
                body = inflate(body, max_body_bytes)
            decoded = signal.decode_json(body) if as_json else signal.decode_protobuf(body)
            result = await signal.ingest(decoded)
        except ClientDisconnect:  # the client went away mid-body: nothing was stored, nobody to answer
            metrics.requests.labels("http", "client_disconnected").inc()
            return Response(status_code=400)
        except BodyTooLarge as exc:
            metrics.requests.labels("http", "too_large").inc()
            return _error(413, 8, str(exc), as_json)
        except (DecodeError, zlib.error) as exc:
            metrics.requests.labels("http", "bad_request").inc()
            return _error(400, 3, str(exc), as_json)
        except TransientStoreError as exc:
            metrics.requests.labels("http", "store_unavailable").inc()
            return _error(503, 14, str(exc), as_json, retry=True)
        finally:
            release()
        metrics.requests.labels("http", "ok").inc()
        return signal.success(result.rejected, result.error_message, as_json)

    return Starlette(routes=[Route("/v1/traces", route(traces), methods=["POST"]),
                             Route("/v1/logs", route(logs), methods=["POST"])])  # fmt: skip


def _success(rejected: int, message: str, as_json: bool) -> Response:
    if as_json:
        payload: dict = {}
        if rejected:
            payload["partialSuccess"] = {"rejectedSpans": str(rejected), "errorMessage": message}
        return Response(json.dumps(payload).encode(), media_type=JSON)
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.CopyFrom(ExportTracePartialSuccess(rejected_spans=rejected, error_message=message))
    return Response(response.SerializeToString(), media_type=PROTOBUF)


def _logs_success(rejected: int, message: str, as_json: bool) -> Response:
    if as_json:
        payload: dict = {}
        if rejected:
            payload["partialSuccess"] = {"rejectedLogRecords": str(rejected), "errorMessage": message}
        return Response(json.dumps(payload).encode(), media_type=JSON)
    response = ExportLogsServiceResponse()
    if rejected:
        partial = ExportLogsPartialSuccess(rejected_log_records=rejected, error_message=message)
        response.partial_success.CopyFrom(partial)
    return Response(response.SerializeToString(), media_type=PROTOBUF)
