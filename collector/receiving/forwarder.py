"""`--forward-otlp URL`: an outbox that tails the store and exports to another OTLP receiver (Jaeger, a collector).

Each destination has its own task and its own persisted cursor (`forward:<url>` in the store), so a destination that
is down loses nothing (the cursor waits, the spans stay in the store) and a dead one never slows a live one.
Retryable answers (connection errors, HTTP 429/502/503/504, gRPC UNAVAILABLE/RESOURCE_EXHAUSTED/...) are retried
forever with capped exponential backoff, honouring `Retry-After` and gRPC `RetryInfo`. A batch the destination
refuses for good (HTTP 400, gRPC INVALID_ARGUMENT, ...) is counted in `agl_collector_forward_batches{outcome=
"rejected"}`, logged and skipped, so one bad span cannot wedge the outbox.

URLs: `http://host:4318` (`/v1/traces` added when no path is given), `https://...`, `grpc://host:4317`.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

import grpc
import httpx
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

from lightning_otel.collector.receiving.ingest import CollectorMetrics, Ingestor
from lightning_otel.collector.stores.store import SpanStore, StoredSpan
from lightning_otel.tls_context import shared_tls_context

log = logging.getLogger("lightning_otel.collector.receiving.forwarder")

_RETRYABLE_HTTP = {408, 429, 502, 503, 504}
_RETRYABLE_GRPC = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.DATA_LOSS,
}
_EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class Rejected(Exception):
    """The destination refused the batch for good: count it and move on."""


class Retry(Exception):
    def __init__(self, reason: str, delay_s: float | None = None) -> None:
        super().__init__(reason)
        self.delay_s = delay_s


def export_request(spans: Sequence[StoredSpan]) -> ExportTraceServiceRequest:
    """Regroup stored spans by resource and scope, from the exact bytes they arrived with."""
    request = ExportTraceServiceRequest()
    resources: dict[bytes, ResourceSpans] = {}
    scopes: dict[tuple[bytes, bytes], ScopeSpans] = {}
    for stored in spans:
        resource_spans = resources.get(stored.resource_bytes)
        if resource_spans is None:
            resource_spans = resources[stored.resource_bytes] = request.resource_spans.add()
            resource_spans.resource.CopyFrom(Resource.FromString(stored.resource_bytes))
        key = (stored.resource_bytes, stored.scope_bytes)
        scope_spans = scopes.get(key)
        if scope_spans is None:
            scope_spans = scopes[key] = resource_spans.scope_spans.add()
            scope_spans.scope.CopyFrom(InstrumentationScope.FromString(stored.scope_bytes))
        scope_spans.spans.add().ParseFromString(stored.span_bytes)
    return request


def _retry_after_s(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        moment = email.utils.parsedate_to_datetime(value)
        return max(moment.timestamp() - time.time(), 0.0) if moment else None


class _HttpDestination:
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        self.url = url if parts.path not in ("", "/") else url.rstrip("/") + "/v1/traces"
        self.client = httpx.AsyncClient(
            timeout=30, headers={"content-type": "application/x-protobuf", **headers}, verify=shared_tls_context()
        )

    async def send(self, body: bytes) -> None:
        try:
            response = await self.client.post(self.url, content=body)
        except httpx.HTTPError as exc:
            raise Retry(f"{type(exc).__name__}: {exc}") from None
        if response.status_code < 300:
            return
        reason = f"HTTP {response.status_code}: {response.text[:200]}"
        if response.status_code in _RETRYABLE_HTTP:
            raise Retry(reason, _retry_after_s(response.headers.get("retry-after")))
        raise Rejected(reason)

    async def close(self) -> None:
        await self.client.aclose()


class _GrpcDestination:
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.target = urlsplit(url).netloc
        self.channel = grpc.aio.insecure_channel(self.target, options=[("grpc.max_send_message_length", 64 << 20)])
        self.export = self.channel.unary_unary(_EXPORT_METHOD, request_serializer=None, response_deserializer=None)
        self.metadata = tuple((key.lower(), value) for key, value in headers.items())

    async def send(self, body: bytes) -> None:
        try:
            await self.export(body, timeout=30, metadata=self.metadata)
        except grpc.aio.AioRpcError as exc:
            reason = f"gRPC {exc.code().name}: {exc.details()}"
            if exc.code() in _RETRYABLE_GRPC:
                raise Retry(reason, _grpc_retry_delay(exc)) from None
            raise Rejected(reason) from None

    async def close(self) -> None:
        await self.channel.close()


def _grpc_retry_delay(error: grpc.aio.AioRpcError) -> float | None:
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            for detail in RpcStatus.FromString(value).details:
                info = RetryInfo()
                if detail.Unpack(info):
                    return info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return None


class Forwarder:
    def __init__(
        self,
        store: SpanStore,
        ingestor: Ingestor,
        url: str,
        *,
        metrics: CollectorMetrics | None = None,
        headers: dict[str, str] | None = None,
        batch_spans: int = 512,
        max_backoff_s: float = 30.0,
    ) -> None:
        scheme = urlsplit(url).scheme
        if scheme not in ("http", "https", "grpc"):
            raise ValueError(f"--forward-otlp {url!r}: use http://host:4318 or grpc://host:4317")
        self.url = url
        self.cursor_name = f"forward:{url}"
        self.store = store
        self.ingestor = ingestor
        self.metrics = metrics or ingestor.metrics
        self.batch_spans = batch_spans
        self.max_backoff_s = max_backoff_s
        self.destination = (_GrpcDestination if scheme == "grpc" else _HttpDestination)(url, headers or {})
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"forward {self.url}")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.destination.close()

    async def _run(self) -> None:
        cursor = await self.store.get_cursor(self.cursor_name)
        while not self._stopping.is_set():
            generation = self.ingestor.commit_generation
            try:
                spans = await self.store.spans_after(cursor, self.batch_spans)
            except Exception:
                log.exception("forwarder %s: reading the store failed; retrying", self.url)
                await asyncio.sleep(1)
                continue
            if not spans:
                await self.ingestor.wait_for_commit(1.0, after=generation)
                continue
            await self._deliver(export_request(spans).SerializeToString(), len(spans))
            cursor = spans[-1].seq
            await self.store.set_cursor(self.cursor_name, cursor)

    async def _deliver(self, body: bytes, count: int) -> None:
        delay = 0.25
        while True:
            try:
                await self.destination.send(body)
            except Retry as retry:
                self.metrics.forward_batches.labels(self.url, "retried").inc()
                wait = retry.delay_s if retry.delay_s is not None else delay * random.uniform(0.8, 1.2)
                log.warning("forwarder %s: %s; retrying in %.1fs", self.url, retry, wait)
                await asyncio.sleep(min(wait, self.max_backoff_s))
                delay = min(delay * 2, self.max_backoff_s)
                continue
            except Rejected as rejected:
                self.metrics.forward_batches.labels(self.url, "rejected").inc()
                self.metrics.forward_spans.labels(self.url, "rejected").inc(count)
                log.error("forwarder %s: batch of %d spans rejected, skipped: %s", self.url, count, rejected)
                return
            self.metrics.forward_batches.labels(self.url, "sent").inc()
            self.metrics.forward_spans.labels(self.url, "sent").inc(count)
            return
