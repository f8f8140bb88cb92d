"""Stored spans out as OTLP/JSON (hex ids, int64 as strings) and as flat, adapter-friendly dicts."""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from lightning_otel.collector.receiving.numeric_arrays import numeric_array_values
from lightning_otel.collector.stores.store import StoredSpan
from lightning_otel.flat_span import Span as FlatSpan
from lightning_otel.flat_span import non_finite_json, wrap_map


def any_value_json(value: AnyValue) -> dict[str, Any]:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return {"stringValue": value.string_value}
    if kind == "bool_value":
        return {"boolValue": value.bool_value}
    if kind == "int_value":
        return {"intValue": str(value.int_value)}
    if kind == "double_value":
        number = value.double_value
        return {"doubleValue": number} if math.isfinite(number) else non_finite_json(number)
    if kind == "array_value":
        return {"arrayValue": {"values": [any_value_json(v) for v in value.array_value.values]}}
    if kind == "kvlist_value":
        return {"kvlistValue": {"values": attributes_json(value.kvlist_value.values)}}
    if kind == "bytes_value":
        return {"bytesValue": base64.b64encode(value.bytes_value).decode()}
    return {}


def attributes_json(attributes: Iterable[KeyValue]) -> list[dict[str, Any]]:
    return [{"key": a.key, "value": any_value_json(a.value)} for a in attributes]


def native_value(value: AnyValue) -> Any:
    """The value of an attribute as JSON can carry it (lists for arrays, dicts for kvlists); NaN and infinities are
    tagged as `lightning_otel.flat_span` describes, and the client restores them."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        # Token-id arrays dominate rollout reads: all-int and all-double arrays from their bytes, others inlined.
        values = numeric_array_values(value.array_value)
        if values is None:
            values = [
                v.int_value
                if (k := v.WhichOneof("value")) == "int_value"
                else v.double_value
                if k == "double_value"
                else native_value(v)
                for v in value.array_value.values
            ]
        if _may_hold_non_finite(values):
            values = [non_finite_json(v) if type(v) is float and not math.isfinite(v) else v for v in values]
        return values
    if kind == "double_value":
        number = value.double_value
        return number if math.isfinite(number) else non_finite_json(number)
    if kind == "kvlist_value":
        return wrap_map({a.key: native_value(a.value) for a in value.kvlist_value.values})
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, kind) if kind else None


def _may_hold_non_finite(values: list[Any]) -> bool:
    try:
        total = sum(values)  # one C loop: a NaN or infinity anywhere makes it non-finite (overflow only may, too)
    except TypeError:  # strings or nested values in the array: look at each float
        return any(type(v) is float and not math.isfinite(v) for v in values)
    return type(total) is float and not math.isfinite(total)


def native_attributes(attributes: Iterable[KeyValue]) -> dict[str, Any]:
    return {a.key: native_value(a.value) for a in attributes}


def span_json(span: Span) -> dict[str, Any]:
    result: dict[str, Any] = {
        "traceId": span.trace_id.hex(),
        "spanId": span.span_id.hex(),
        "name": span.name,
        "kind": span.kind,
        "startTimeUnixNano": str(span.start_time_unix_nano),
        "endTimeUnixNano": str(span.end_time_unix_nano),
        "attributes": attributes_json(span.attributes),
        "events": [
            {
                "timeUnixNano": str(e.time_unix_nano),
                "name": e.name,
                "attributes": attributes_json(e.attributes),
                **({"droppedAttributesCount": e.dropped_attributes_count} if e.dropped_attributes_count else {}),
            }
            for e in span.events
        ],
        "links": [
            {
                "traceId": link.trace_id.hex(),
                "spanId": link.span_id.hex(),
                "traceState": link.trace_state,
                "attributes": attributes_json(link.attributes),
                "flags": link.flags,
                **({"droppedAttributesCount": link.dropped_attributes_count} if link.dropped_attributes_count else {}),
            }
            for link in span.links
        ],
        "status": {"code": span.status.code, **({"message": span.status.message} if span.status.message else {})},
    }
    if span.parent_span_id:
        result["parentSpanId"] = span.parent_span_id.hex()
    if span.trace_state:
        result["traceState"] = span.trace_state
    if span.flags:
        result["flags"] = span.flags
    for key, count in (
        ("droppedAttributesCount", span.dropped_attributes_count),
        ("droppedEventsCount", span.dropped_events_count),
        ("droppedLinksCount", span.dropped_links_count),
    ):
        if count:
            result[key] = count
    return result


def traces_data_json(spans: Iterable[StoredSpan]) -> dict[str, Any]:
    """`{"resourceSpans": [...]}` grouping spans by resource and scope, keeping their order."""
    resources: dict[bytes, dict[str, Any]] = {}
    scopes: dict[tuple[bytes, bytes], list[dict[str, Any]]] = {}
    for stored in spans:
        resource_entry = resources.get(stored.resource_bytes)
        if resource_entry is None:
            resource = Resource.FromString(stored.resource_bytes)
            resource_entry = resources[stored.resource_bytes] = {
                "resource": {"attributes": attributes_json(resource.attributes)},
                "scopeSpans": [],
            }
        key = (stored.resource_bytes, stored.scope_bytes)
        scope_spans = scopes.get(key)
        if scope_spans is None:
            scope = InstrumentationScope.FromString(stored.scope_bytes)
            scope_spans = scopes[key] = []
            resource_entry["scopeSpans"].append(
                {
                    "scope": {
                        "name": scope.name,
                        "version": scope.version,
                        **({"attributes": attributes_json(scope.attributes)} if scope.attributes else {}),
                    },
                    "spans": scope_spans,
                }
            )
        scope_spans.append(span_json(Span.FromString(stored.span_bytes)))
    return {"resourceSpans": list(resources.values())}


def flat_span(stored: StoredSpan) -> FlatSpan:
    """One span as a plain dict with native attribute values: what adapters consume."""
    span = Span.FromString(stored.span_bytes)
    return {
        "seq": stored.seq,
        "traceId": span.trace_id.hex(),
        "spanId": span.span_id.hex(),
        "parentSpanId": span.parent_span_id.hex() or None,
        "name": span.name,
        "kind": span.kind,
        "startTimeUnixNano": span.start_time_unix_nano,
        "endTimeUnixNano": span.end_time_unix_nano,
        "service": stored.service_name,
        "attributes": native_attributes(span.attributes),
        "events": [
            {"name": e.name, "timeUnixNano": e.time_unix_nano, "attributes": native_attributes(e.attributes)}
            for e in span.events
        ],
        "links": [
            {
                "traceId": link.trace_id.hex(),
                "spanId": link.span_id.hex(),
                "attributes": native_attributes(link.attributes),
            }
            for link in span.links
        ],
        "status": {"code": span.status.code, "message": span.status.message},
    }
