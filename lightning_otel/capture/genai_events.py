"""The GenAI `gen_ai.client.inference.operation.details` event as an OTLP log record, as the latest conventions
recommend (#579), instead of a span event.

Only with the latest conventions opted into (`OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`), message
content recorded as an event (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` `true`, `EVENT_ONLY` or
`SPAN_AND_EVENT`), and spans exported over OTLP by us (`instrument()` with an endpoint, a runner): the records then
go to the same place as the spans, `/v1/logs` beside `/v1/traces` (or `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`), each
with the trace and span id of its LLM call. Our collector stores them and reads them among their span's events,
so the adapter, the export and the rollout view read a call's messages from its record as from a span event.
Otherwise (spans to a custom exporter, a provider the user set up with no endpoint asked) the event stays on the
span, where every reader finds it too.

The logger provider is ours alone: the global one (the user's, ADK's) is never set or changed.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource

from lightning_otel import semconv
from lightning_otel.capture.settings import settings
from lightning_otel.version import __version__

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_pipeline: _LogPipeline | None = None


class _LogPipeline:
    def __init__(self, exporter: Any, resource: Resource | None) -> None:
        # the logs SDK is imported here: its API moved between releases (event names on records: 1.35+), and a
        # process that never opts in never loads it
        from opentelemetry._logs import LogRecord, SeverityNumber
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

        LogRecord(event_name="probe")  # type: ignore[call-arg]  # a TypeError on SDKs without event names
        self.record, self.severity = LogRecord, SeverityNumber.INFO
        self.provider = LoggerProvider(resource=resource) if resource is not None else LoggerProvider()
        self.provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
        self.logger = self.provider.get_logger("lightning_otel", __version__)


def wanted() -> bool:
    """Whether the operation-details event should be a log record (the opt-in and an event content mode)."""
    return settings.latest_genai and settings.content.as_event


def start(
    endpoint: str | None,
    protocol: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    resource: Resource | None = None,
) -> bool:
    """Send the operation-details events as log records to the OTLP `endpoint` (a base URL, as spans'; None: the
    `OTEL_EXPORTER_OTLP_*` variables) when `wanted()`; returns whether they go there now. Called again, it replaces
    the previous pipeline (flushed first)."""
    global _pipeline
    if not wanted():
        return False
    try:
        pipeline = _LogPipeline(log_exporter(endpoint, protocol, headers=headers), resource)
    except (ImportError, TypeError) as exc:
        logger.warning("lightning-otel: this OpenTelemetry SDK cannot write event log records (%s): the "
                       "operation-details event stays on the span", exc)  # fmt: skip
        return False
    with _lock:
        previous, _pipeline = _pipeline, pipeline
    if previous is not None:
        previous.provider.shutdown()
    return True


def log_exporter(endpoint: str | None, protocol: str | None = None, *, headers: Mapping[str, str] | None = None) -> Any:
    """The SDK's OTLP log exporter for `protocol` (`http/protobuf` default, or `grpc`) to the base URL `endpoint`."""
    protocol = (protocol or os.environ.get("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()  # fmt: skip
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter

        return GrpcLogExporter(endpoint=endpoint, headers=dict(headers) if headers else None)
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    url = os.environ.get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")
    if endpoint is not None:
        base = endpoint.rstrip("/").removesuffix("/v1/traces")
        url = base + "/v1/logs"
    return OTLPLogExporter(endpoint=url, headers=dict(headers) if headers else None)


def emit(span: trace.Span, name: str, attributes: Mapping[str, Any], timestamp: int) -> bool:
    """Record the event `name` of `span` as a log record with the span's ids; False when no pipeline runs (the
    caller adds it to the span instead)."""
    pipeline = _pipeline
    if pipeline is None:
        return False
    # the rollout's identity, so a record read apart from its span still names its rollout
    span_attributes = getattr(span, "attributes", None) or {}
    identity = {key: span_attributes[key] for key in (semconv.AGL_ROLLOUT_ID, semconv.AGL_ATTEMPT_ID)
                if key in span_attributes}  # fmt: skip
    pipeline.logger.emit(pipeline.record(
        timestamp=timestamp, observed_timestamp=timestamp, context=trace.set_span_in_context(span),
        severity_number=pipeline.severity, event_name=name, attributes={**attributes, **identity},
    ))  # fmt: skip
    return True


def force_flush(timeout_millis: int = 30_000) -> bool:
    pipeline = _pipeline
    return pipeline is None or bool(pipeline.provider.force_flush(timeout_millis))


def stop() -> None:
    """Flush and stop the pipeline: later events go on their spans again."""
    global _pipeline
    with _lock:
        pipeline, _pipeline = _pipeline, None
    if pipeline is not None:
        pipeline.provider.shutdown()


__all__ = ["emit", "force_flush", "log_exporter", "start", "stop", "wanted"]
