"""OTLP log records: decoded (protobuf or OTLP/JSON), stored with their trace and span ids (`agl_logs`), and read
back beside their spans.

Harnesses and frameworks write part of what they know as log records, not span attributes: ADK's newer path the
messages of each model call (`gen_ai.client.inference.operation.details`), Claude Code its events (`api_request`,
`tool_result`, ...). The collector keeps each record once (keyed by a digest of the record and its resource: a resent
batch is not stored twice), as a flat JSON document (its body and attributes as native values, its event name,
severity, service and scope).

Reads join them to spans: a span read for the trainer, the export or the rollout view carries its records in its
`events`, each marked `"log": true`, so whatever reads a span's events (the adapter's messages, the view's
waterfall) reads its log records the same way. A record with no span (a harness's startup events) belongs to the
rollout its attributes or resource name (`agl.rollout.id`), and the rollout view lists it apart.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from lightning_otel import semconv
from lightning_otel.collector.queue_schema import LOG_SCHEMA as LOG_SCHEMA  # the table (both stores create it)
from lightning_otel.collector.receiving.otlp_decoding import DecodeError
from lightning_otel.collector.receiving.otlp_json import native_attributes, native_value
from lightning_otel.collector.stores.store import SpanStore, StateTransaction

_INSERT = (
    "INSERT INTO agl_logs (digest, trace_id, span_id, rollout_id, attempt_id, time_ns, record) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING"
)
_BY_TRACE_CHUNK = 500  # trace ids per IN (...) query: under every database's parameter limit


@dataclass(slots=True)
class LogRow:
    digest: str
    trace_id: str  # hex, "" when the record names no trace
    span_id: str
    rollout_id: str | None
    attempt_id: str | None
    time_ns: int
    record: dict[str, Any]

    def values(self) -> tuple[object, ...]:
        record = orjson.dumps(self.record).decode()
        return (self.digest, self.trace_id, self.span_id, self.rollout_id, self.attempt_id, self.time_ns, record)


@dataclass(slots=True)
class DecodedLogs:
    rows: list[LogRow]
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def error_message(self) -> str:
        return "; ".join(self.errors[:5]) + (f" (and {len(self.errors) - 5} more)" if len(self.errors) > 5 else "")


def decode_logs_protobuf(body: bytes) -> DecodedLogs:
    try:
        request = ExportLogsServiceRequest.FromString(body)
    except Exception as exc:  # protobuf raises DecodeError and, on some inputs, other errors
        raise DecodeError(f"invalid OTLP logs protobuf: {exc}") from exc
    return rows_of(request)


def decode_logs_json(body: bytes) -> DecodedLogs:
    """OTLP/JSON logs: protobuf's JSON mapping, but trace and span ids in hex (as OTLP/JSON writes them)."""
    try:
        document = json.loads(body)
        if not isinstance(document, dict):
            raise ValueError("an OTLP/JSON request must be a JSON object")
        for resource_logs in document.get("resourceLogs") or document.get("resource_logs") or []:
            for scope_logs in resource_logs.get("scopeLogs") or resource_logs.get("scope_logs") or []:
                for record in scope_logs.get("logRecords") or scope_logs.get("log_records") or []:
                    _hex_ids_as_base64(record)
        request = json_format.ParseDict(document, ExportLogsServiceRequest(), ignore_unknown_fields=True)
    except (ValueError, TypeError, AttributeError, RecursionError, json_format.ParseError) as exc:
        raise DecodeError(f"invalid OTLP/JSON logs request: {exc}") from exc
    return rows_of(request)


def _hex_ids_as_base64(record: Any) -> None:
    if not isinstance(record, dict):
        raise ValueError("a log record must be a JSON object")
    for key in ("traceId", "trace_id", "spanId", "span_id"):
        value = record.get(key)
        if isinstance(value, str) and value:
            try:
                record[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                raise ValueError(f"log record {key} must be hex, got {value[:40]!r}") from None


def rows_of(request: ExportLogsServiceRequest) -> DecodedLogs:
    decoded = DecodedLogs([])
    for resource_logs in request.resource_logs:
        resource = resource_logs.resource
        resource_bytes = resource.SerializeToString(deterministic=True)
        resource_attributes = native_attributes(resource.attributes)
        service = str(resource_attributes.get("service.name") or "unknown_service")
        for scope_logs in resource_logs.scope_logs:
            scope = scope_logs.scope.name
            for record in scope_logs.log_records:
                problem = _id_problem(record)
                if problem:
                    decoded.rejected += 1
                    decoded.errors.append(problem)
                    continue
                decoded.rows.append(_row(record, resource_bytes, resource_attributes, service, scope))
    return decoded


def _id_problem(record: LogRecord) -> str | None:
    if len(record.trace_id) not in (0, 16):
        return f"log record: trace_id must be empty or 16 bytes, got {len(record.trace_id)}"
    if len(record.span_id) not in (0, 8):
        return f"log record: span_id must be empty or 8 bytes, got {len(record.span_id)}"
    return None


def _row(record: LogRecord, resource_bytes: bytes, resource: dict[str, Any], service: str, scope: str) -> LogRow:
    attributes = native_attributes(record.attributes)
    digest = hashlib.blake2b(resource_bytes + b"\0" + record.SerializeToString(deterministic=True), digest_size=16)
    time_ns = record.time_unix_nano or record.observed_time_unix_nano
    flat = {
        "timeUnixNano": time_ns,
        "severityNumber": record.severity_number,
        "severityText": record.severity_text,
        "eventName": record.event_name or _event_name(record.attributes),
        "body": native_value(record.body) if record.HasField("body") else None,
        "attributes": attributes,
        "traceId": record.trace_id.hex(),
        "spanId": record.span_id.hex(),
        "service": service,
        "scope": scope,
    }
    return LogRow(
        digest.hexdigest(),
        record.trace_id.hex(),
        record.span_id.hex(),
        _text(attributes.get(semconv.AGL_ROLLOUT_ID)) or _text(resource.get(semconv.AGL_ROLLOUT_ID)),
        _text(attributes.get(semconv.AGL_ATTEMPT_ID)) or _text(resource.get(semconv.AGL_ATTEMPT_ID)),
        min(time_ns, 2**63 - 1),
        flat,
    )


def _event_name(attributes: Sequence[KeyValue]) -> str:
    """Older SDKs put the event's name in an `event.name` attribute."""
    return next((a.value.string_value for a in attributes if a.key == "event.name"), "")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


async def write_logs(store: SpanStore, rows: Sequence[LogRow]) -> None:
    """Commit `rows` (a record stored before is left as it was); returns once they are durable."""
    if rows:
        values = [row.values() for row in rows]
        await store.state_transaction(lambda tx: tx.executemany(_INSERT, values))


def _records_for_traces(tx: StateTransaction, trace_ids: Sequence[str]) -> list[dict[str, Any]]:
    records = []
    for start in range(0, len(trace_ids), _BY_TRACE_CHUNK):
        chunk = trace_ids[start : start + _BY_TRACE_CHUNK]
        marks = ", ".join("?" * len(chunk))
        sql = f"SELECT record FROM agl_logs WHERE trace_id IN ({marks}) AND span_id <> '' ORDER BY time_ns"
        records += [orjson.loads(row[0]) for row in tx.execute(sql, tuple(chunk))]
    return records


async def logs_by_span(store: SpanStore, trace_ids: Sequence[str]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The log records of these traces that name a span, by (trace id, span id) in hex, each span's in time order."""
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    if trace_ids:
        wanted = sorted(set(trace_ids))
        for record in await store.state_transaction(lambda tx: _records_for_traces(tx, wanted)):
            found.setdefault((record["traceId"], record["spanId"]), []).append(record)
    return found


async def attach_logs(store: SpanStore, spans: Sequence[dict[str, Any]]) -> None:
    """Add each span's log records to its `events` (marked `"log": true`), in time order."""
    records = await logs_by_span(store, [str(span["traceId"]) for span in spans])
    for span in spans if records else ():
        for record in records.get((span["traceId"], span["spanId"]), ()):
            span.setdefault("events", []).append(log_event(record))


def log_event(record: dict[str, Any]) -> dict[str, Any]:
    """A log record as a span event: its event name (else its body, as text), time and attributes."""
    name = record.get("eventName") or (record["body"] if isinstance(record.get("body"), str) else "log")
    attributes = dict(record.get("attributes") or {})
    if record.get("body") is not None and not isinstance(record.get("body"), str):
        attributes.setdefault("log.body", record["body"])  # a structured body: kept, under its own key
    return {"name": name, "timeUnixNano": record.get("timeUnixNano") or 0, "attributes": attributes, "log": True,
            "severityText": record.get("severityText") or None, "service": record.get("service")}  # fmt: skip


async def rollout_logs_without_span(store: SpanStore, rollout_id: str, attempt_id: str | None) -> list[dict]:
    """The records of a rollout that name no span (a harness's own events), in time order."""

    def read(tx: StateTransaction) -> list[dict[str, Any]]:
        sql = "SELECT record FROM agl_logs WHERE rollout_id = ? AND span_id = ''"
        parameters: tuple[object, ...] = (rollout_id,)
        if attempt_id:
            sql += " AND (attempt_id = ? OR attempt_id IS NULL)"
            parameters += (attempt_id,)
        return [orjson.loads(row[0]) for row in tx.execute(sql + " ORDER BY time_ns", parameters)]

    return await store.state_transaction(read)
