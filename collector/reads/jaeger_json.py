"""Stored spans in Jaeger's legacy query JSON (what Grafana and the classic Jaeger UI read from `/api/traces`).

Shapes follow Jaeger's `model/json`: microsecond times, CHILD_OF (parent) and FOLLOWS_FROM (links) references,
processes deduplicated per trace (`p1`, `p2`...), `span.kind` / `otel.status_code` / `error` tags, events as
logs, typed tags (`string`, `bool`, `int64`, `float64`, `binary`), int64 beyond 2^53 as strings.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from lightning_otel.collector.receiving.otlp_json import native_value
from lightning_otel.collector.stores.store import StoredSpan
from lightning_otel.flat_span import non_finite_json, restore_non_finite

_KIND = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
_STATUS = {1: "OK", 2: "ERROR"}
_SAFE_INTEGER = 2**53


def trace_id_hex(trace_id: bytes) -> str:
    """Jaeger prints a 128-bit id whose high half is zero as 16 hex digits."""
    return trace_id[8:].hex() if not any(trace_id[:8]) else trace_id.hex()


def _tag(key: str, value: AnyValue) -> dict[str, Any]:
    kind = value.WhichOneof("value")
    if kind == "bool_value":
        return {"key": key, "type": "bool", "value": value.bool_value}
    if kind == "int_value":
        number = value.int_value
        return {"key": key, "type": "int64", "value": number if abs(number) < _SAFE_INTEGER else str(number)}
    if kind == "double_value":
        number = value.double_value  # JSON has no NaN: the protobuf JSON mapping's names, as strings
        return {"key": key, "type": "float64", "value": number if math.isfinite(number) else _non_finite(number)}
    if kind == "bytes_value":
        return {"key": key, "type": "binary", "value": base64.b64encode(value.bytes_value).decode()}
    if kind in ("array_value", "kvlist_value"):
        return {"key": key, "type": "string", "value": _compact_json(native_value(value))}
    return {"key": key, "type": "string", "value": value.string_value if kind else ""}


def _tags(attributes: Iterable[KeyValue]) -> list[dict[str, Any]]:
    return [_tag(a.key, a.value) for a in attributes]


def _string_tag(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "type": "string", "value": value}


def jaeger_trace(
    spans: list[StoredSpan], logs: Mapping[tuple[str, str], list[dict[str, Any]]] | None = None
) -> dict[str, Any]:
    processes: dict[bytes, str] = {}
    process_json: dict[str, Any] = {}
    jaeger_spans = []
    for stored in spans:
        process_id = processes.get(stored.resource_bytes)
        if process_id is None:
            process_id = processes[stored.resource_bytes] = f"p{len(processes) + 1}"
            resource = Resource.FromString(stored.resource_bytes)
            process_json[process_id] = {
                "serviceName": stored.service_name,
                "tags": [t for t in _tags(resource.attributes) if t["key"] != "service.name"],
            }
        jaeger_spans.append(_jaeger_span(stored, process_id, logs or {}))
    trace_id = trace_id_hex(spans[0].trace_id) if spans else ""
    return {"traceID": trace_id, "spans": jaeger_spans, "processes": process_json, "warnings": None}


def _jaeger_span(stored: StoredSpan, process_id: str, records: Mapping[tuple[str, str], list[dict]]) -> dict[str, Any]:
    span = Span.FromString(stored.span_bytes)
    trace_id = trace_id_hex(span.trace_id)
    references = []
    if span.parent_span_id:
        references.append({"refType": "CHILD_OF", "traceID": trace_id, "spanID": span.parent_span_id.hex()})
    for link in span.links:
        references.append(
            {"refType": "FOLLOWS_FROM", "traceID": trace_id_hex(link.trace_id), "spanID": link.span_id.hex()}
        )
    tags = _tags(span.attributes)
    scope = InstrumentationScope.FromString(stored.scope_bytes)
    if scope.name:
        tags.append(_string_tag("otel.scope.name", scope.name))
    if scope.version:
        tags.append(_string_tag("otel.scope.version", scope.version))
    if span.kind in _KIND:
        tags.append(_string_tag("span.kind", _KIND[span.kind]))
    if span.status.code in _STATUS:
        tags.append(_string_tag("otel.status_code", _STATUS[span.status.code]))
        if span.status.message:
            tags.append(_string_tag("otel.status_description", span.status.message))
    if span.status.code == 2:
        tags.append({"key": "error", "type": "bool", "value": True})
    logs = [
        {
            "timestamp": event.time_unix_nano // 1000,
            "fields": [_string_tag("event", event.name), *_tags(event.attributes)],
        }
        for event in span.events
    ]
    for record in records.get((span.trace_id.hex(), span.span_id.hex()), ()):  # the span's OTLP log records
        fields = [_string_tag("event", record.get("eventName") or "log")]
        if record.get("body") is not None:
            fields.append(_native_tag("body", record["body"]))
        fields += [_native_tag(key, value) for key, value in (record.get("attributes") or {}).items()]
        logs.append({"timestamp": int(record.get("timeUnixNano") or 0) // 1000, "fields": fields})
    logs.sort(key=lambda log: log["timestamp"])
    return {
        "traceID": trace_id,
        "spanID": span.span_id.hex(),
        "flags": span.flags & 0xFF or 1,
        "operationName": span.name,
        "references": references,
        "startTime": span.start_time_unix_nano // 1000,
        "duration": max(span.end_time_unix_nano - span.start_time_unix_nano, 0) // 1000,
        "tags": tags,
        "logs": logs,
        "processID": process_id,
        "warnings": None,
    }


def _native_tag(key: str, value: Any) -> dict[str, Any]:
    """A tag from a native value (a log record's attribute, as the collector keeps it)."""
    if isinstance(value, bool):
        return {"key": key, "type": "bool", "value": value}
    if isinstance(value, int):
        return {"key": key, "type": "int64", "value": value if abs(value) < 2**53 else str(value)}
    if isinstance(value, float):
        return {"key": key, "type": "float64", "value": value}
    return _string_tag(key, value if isinstance(value, str) else _compact_json(value))


def envelope(data: Any, *, total: int | None = None) -> dict[str, Any]:
    return {
        "data": data,
        "total": total if total is not None else (len(data) if isinstance(data, list) else 0),
        "limit": 0,
        "offset": 0,
        "errors": None,
    }


def span_matches_tags(stored: StoredSpan, tags: dict[str, str]) -> bool:
    """Jaeger tag search: every tag equals (as a string) a span attribute, a process tag or a derived tag."""
    if not tags:
        return True
    span = Span.FromString(stored.span_bytes)
    values: dict[str, str] = {}
    for attribute in Resource.FromString(stored.resource_bytes).attributes:
        values[attribute.key] = _as_text(attribute.value)
    for attribute in span.attributes:
        values[attribute.key] = _as_text(attribute.value)
    if span.status.code == 2:
        values["error"] = "true"
    if span.kind in _KIND:
        values["span.kind"] = _KIND[span.kind]
    if span.status.code in _STATUS:
        values["otel.status_code"] = _STATUS[span.status.code]
    return all(values.get(key) == str(expected) for key, expected in tags.items())


def _compact_json(native: Any) -> str:
    """An array's or map's `native_value` as Jaeger renders it: compact JSON, UTF-8 kept, NaN and infinities by
    name."""
    return json.dumps(_plain(restore_non_finite(native)), separators=(",", ":"), ensure_ascii=False)


def _plain(native: Any) -> Any:
    if isinstance(native, float) and not math.isfinite(native):
        return _non_finite(native)
    if isinstance(native, list):
        return [_plain(item) for item in native]
    if isinstance(native, dict):
        return {key: _plain(item) for key, item in native.items()}
    return native


def _non_finite(number: float) -> str:
    return non_finite_json(number)["doubleValue"]


def _as_text(value: AnyValue) -> str:
    native = native_value(value)
    if isinstance(native, bool):
        return "true" if native else "false"
    if isinstance(native, (list, dict)):
        return _compact_json(native)
    return str(native)
