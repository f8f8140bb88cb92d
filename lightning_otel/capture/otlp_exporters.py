"""OTLP trace exporters of our own: the SDK's exporters, with the request written as wire bytes by
`lightning_otel.capture.otlp_encoding` (the same message, a fraction of the CPU).

Only exporters we construct use them: the one `instrument()` installs, the runners' and the policy gateway's. A
user's own exporters in the same process are never changed. To plain-`http://` endpoints they send through one
kept-alive connection (`otlp_http_transport`, given to the SDK's private `_transport` parameter) instead of a
`requests` session. This is the one module that touches the OTLP exporter packages' internals (the HTTP exporter's
send path and transport, the gRPC exporter's `_translate_data` hook); each is gated on the exporter versions it was
tested against and, on any other version, is the SDK's exporter unchanged.

Usage:
    provider.add_span_processor(BatchSpanProcessor(otlp_http_exporter("http://127.0.0.1:4318")))
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as SDKHTTPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE

from lightning_otel.capture.otlp_encoding import encode_request, encode_spans
from lightning_otel.capture.tested_versions import is_tested

logger = logging.getLogger(__name__)

FAST_HTTP = is_tested("opentelemetry-exporter-otlp-proto-http")
FAST_GRPC = is_tested("opentelemetry-exporter-otlp-proto-grpc")


# What a collector answers while it restarts or its store is down: worth sending again later (as the SDK does).
_RETRYABLE_STATUS = frozenset({408, 429, 502, 503, 504})


class FastHTTPSpanExporter(SDKHTTPSpanExporter):
    """The SDK's OTLP/HTTP span exporter; on tested versions, our encoder builds the request body. `retry_for_s`:
    beyond the SDK's own retries (six tries, about 6 s against a collector answering 503 + Retry-After: 1), keep
    re-sending a batch the collector could not take for up to this long, so a collector restart or a database
    outage of a minute loses no span (0: the SDK's behaviour)."""

    def __init__(self, *args: Any, retry_for_s: float = 0.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retry_for_s = retry_for_s

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not FAST_HTTP or self._shutdown:
            return super().export(spans)
        try:
            body = encode_request(spans)
        except Exception:  # an odd span: the SDK's own path encodes it, or reports why it cannot
            logger.debug("lightning-otel: fast OTLP encoding failed, using the SDK's encoder", exc_info=True)
            return super().export(spans)
        limit = self._max_request_size
        if limit and limit > 0 and len(body) > limit:
            return super().export(spans)  # the SDK logs and refuses an oversized batch its own way
        # From here as the SDK's export: its metrics, its HTTP client (retries, compression, timeouts).
        with self._metrics.export_operation(len(spans)) as result:
            sent = self._client.export(body)
            began, pause = time.monotonic(), 0.5
            # the bound is read each time: a process that stops lowers it (the runner's SIGTERM) and is heard at once
            while not sent.success and _retryable(sent.status_code) and time.monotonic() - began < self.retry_for_s:
                if self._shutdown:
                    break
                logger.warning("lightning-otel: the collector did not take %d spans (%s): sending again in %.1f s",
                               len(spans), sent.status_code or sent.error, pause)  # fmt: skip
                time.sleep(pause)
                sent = self._client.export(body)
                pause = min(pause * 2, 2.0)
            if not sent.success:
                result.error = sent.error
                if sent.status_code is not None:
                    result.error_attrs = {HTTP_RESPONSE_STATUS_CODE: sent.status_code}
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS


def _retryable(status_code: int | None) -> bool:
    return status_code is None or status_code in _RETRYABLE_STATUS  # None: no answer (refused, reset)


def otlp_http_exporter(
    base_url: str | None = None,
    *,
    auth_token: str | None = None,
    endpoint: str | None = None,
    retry_for_s: float = 0.0,
) -> SDKHTTPSpanExporter:
    """Our OTLP/HTTP exporter to `base_url` (`/v1/traces` appended) or to the full `endpoint`; `None` for both: the
    `OTEL_EXPORTER_OTLP_*` variables. `auth_token` becomes a bearer `authorization` header; `retry_for_s`: how long
    a batch the collector cannot take is sent again (the runners' and the gateway's ride out collector faults)."""
    if endpoint is None and base_url is not None:
        endpoint = base_url.rstrip("/") + "/v1/traces"
    headers = {"authorization": f"Bearer {auth_token}"} if auth_token else None
    transport: dict[str, Any] = {}
    if FAST_HTTP and endpoint is not None and endpoint.startswith("http://"):
        from lightning_otel.capture.otlp_http_transport import KeptConnectionTransport

        transport["_transport"] = KeptConnectionTransport()  # the SDK's transport parameter (1.45)
    return FastHTTPSpanExporter(endpoint=endpoint, headers=headers, retry_for_s=retry_for_s, **transport)


@functools.cache
def _grpc_exporter_class() -> type[SpanExporter]:
    # grpc is imported only by processes that export over gRPC
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as SDKGrpcSpanExporter

    class FastGrpcSpanExporter(SDKGrpcSpanExporter):
        """The SDK's OTLP/gRPC span exporter; on tested versions, our encoder builds the request."""

        def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
            return encode_spans(data) if FAST_GRPC else super()._translate_data(data)

    return FastGrpcSpanExporter


def otlp_grpc_exporter(endpoint: str | None = None) -> SpanExporter:
    """Our OTLP/gRPC exporter to `endpoint` (default: the `OTEL_EXPORTER_OTLP_*` variables)."""
    return _grpc_exporter_class()(endpoint=endpoint)
