"""OTLP/JSON trace requests decoded by our own walk (`google.protobuf.json_format.Parse` silently reads OTLP/JSON's
hex ids as base64): ids are hex (any case, nothing else), enums integers (names accepted too), 64-bit integers may
be strings, keys lowerCamelCase or snake_case, unknown fields ignored; every value checked against its field's range,
nested at most `MAX_VALUE_DEPTH` levels. A span that breaks a rule is left out and reported, the rest kept; a broken
envelope raises `DecodeError`. The request built is then read as a protobuf one is (`otlp_decoding.records_of`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from lightning_otel.collector.receiving.otlp_decoding import DecodedRequest, DecodeError, records_of
from lightning_otel.flat_span import NON_FINITE

MAX_VALUE_DEPTH = 40  # protobuf parses messages at most 100 levels deep; a span adds ~6, each nested value 2
UINT32 = (0, 2**32 - 1)
UINT64 = (0, 2**64 - 1)
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
_HEX = re.compile(r"[0-9a-fA-F]*")


def decode_json(body: bytes) -> DecodedRequest:
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DecodeError(f"invalid JSON: {exc}") from exc
    except RecursionError:
        raise DecodeError("invalid JSON: nested too deeply") from None
    if not isinstance(document, dict):
        raise DecodeError("an OTLP/JSON request must be a JSON object")
    try:
        request, problems = _request_and_problems(document)
    except (ValueError, TypeError) as exc:  # protobuf refused a resource or scope value (range, Unicode)
        raise DecodeError(f"invalid OTLP/JSON request: {exc}") from exc
    except RecursionError:
        raise DecodeError("invalid OTLP/JSON request: nested too deeply") from None
    decoded = records_of(request)
    decoded.errors[:0] = problems
    decoded.rejected += len(problems)
    return decoded


def _get(obj: dict[str, Any], camel: str, snake: str | None = None) -> Any:
    if camel in obj:
        return obj[camel]
    return obj.get(snake) if snake else None


def _list(obj: dict[str, Any], camel: str, snake: str | None = None) -> list[Any]:
    value = _get(obj, camel, snake)
    if value is None:
        return []
    if not isinstance(value, list):
        raise DecodeError(f"{camel} must be a list")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DecodeError(f"{where} must be an object, got {type(value).__name__}")
    return value


def _objects(obj: dict[str, Any], camel: str, snake: str | None, where: str) -> list[dict[str, Any]]:
    return [_object(item, f"{where}.{camel}[]") for item in _list(obj, camel, snake)]


def _text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DecodeError(f"{where} must be a string, got {type(value).__name__}")
    return value


def _int(value: Any, where: str, bounds: tuple[int, int] = INT64) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, bool):
        raise DecodeError(f"{where} must be an integer")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        try:
            number = int(value)
        except ValueError:
            raise DecodeError(f"{where} must be an integer, got {value!r}") from None
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        raise DecodeError(f"{where} must be an integer, got {value!r}")
    if not bounds[0] <= number <= bounds[1]:
        raise DecodeError(f"{where} = {value!r} is outside [{bounds[0]}, {bounds[1]}]")
    return number


def _enum(value: Any, names: dict[str, int], where: str) -> int:
    if isinstance(value, str) and value in names:
        return names[value]
    return _int(value, where, INT32)


_KINDS = {
    name: number
    for number, name in enumerate(
        [
            "SPAN_KIND_UNSPECIFIED",
            "SPAN_KIND_INTERNAL",
            "SPAN_KIND_SERVER",
            "SPAN_KIND_CLIENT",
            "SPAN_KIND_PRODUCER",
            "SPAN_KIND_CONSUMER",
        ]
    )
}
_STATUS = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


def _hex_id(value: Any, size: int, where: str) -> bytes:
    if value is None or value == "":
        return b""
    if not isinstance(value, str):
        raise DecodeError(f"{where} must be a hex string")
    if not _HEX.fullmatch(value):  # bytes.fromhex alone would accept spaces
        raise DecodeError(f"{where} {value!r} is not hex")
    if len(value) != size * 2:
        raise DecodeError(f"{where} {value!r} must be {size} bytes ({size * 2} hex digits)")
    return bytes.fromhex(value)


def _double(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise DecodeError(f"{where} must be a number")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        if value in NON_FINITE:  # the protobuf JSON mapping's names
            return NON_FINITE[value]
        try:
            return float(value)
        except ValueError:
            pass
    raise DecodeError(f"{where} must be a number, got {value!r}")


def _bytes(value: Any, where: str) -> bytes:
    if not isinstance(value, str):
        raise DecodeError(f"{where} must be a base64 string")
    try:  # the protobuf JSON mapping accepts standard and URL-safe base64
        return base64.b64decode(value.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise DecodeError(f"{where} must be base64, got {value[:40]!r}") from None


def any_value_from_json(value: Any, where: str = "value", depth: int = 0) -> AnyValue:
    if depth > MAX_VALUE_DEPTH:
        raise DecodeError(f"{where} is nested deeper than {MAX_VALUE_DEPTH} levels")
    data = _object(value, where)
    if "stringValue" in data or "string_value" in data:
        return AnyValue(string_value=_text(_get(data, "stringValue", "string_value"), f"{where}.stringValue"))
    if "boolValue" in data or "bool_value" in data:
        flag = _get(data, "boolValue", "bool_value")
        if not isinstance(flag, bool):
            raise DecodeError(f"{where}.boolValue must be a boolean")
        return AnyValue(bool_value=flag)
    if "intValue" in data or "int_value" in data:
        return AnyValue(int_value=_int(_get(data, "intValue", "int_value"), f"{where}.intValue"))
    if "doubleValue" in data or "double_value" in data:
        return AnyValue(double_value=_double(_get(data, "doubleValue", "double_value"), f"{where}.doubleValue"))
    if "arrayValue" in data or "array_value" in data:
        array = _object(_get(data, "arrayValue", "array_value"), f"{where}.arrayValue")
        values = [any_value_from_json(v, f"{where}[]", depth + 1) for v in _list(array, "values")]
        return AnyValue(array_value=ArrayValue(values=values))
    if "kvlistValue" in data or "kvlist_value" in data:
        kvlist = _object(_get(data, "kvlistValue", "kvlist_value"), f"{where}.kvlistValue")
        return AnyValue(kvlist_value=KeyValueList(values=_attributes(kvlist, "values", None, where, depth + 1)))
    if "bytesValue" in data or "bytes_value" in data:
        return AnyValue(bytes_value=_bytes(_get(data, "bytesValue", "bytes_value"), f"{where}.bytesValue"))
    return AnyValue()


def _attributes(
    obj: dict[str, Any], camel: str = "attributes", snake: str | None = "attributes", where: str = "", depth: int = 0
) -> list[KeyValue]:
    result = []
    for item in _objects(obj, camel, snake, where):
        key = item.get("key")
        if not isinstance(key, str):
            raise DecodeError(f"{where}.{camel}[].key must be a string")
        result.append(KeyValue(key=key, value=any_value_from_json(item.get("value"), f"attribute {key!r}", depth)))
    return result


def _dropped(obj: dict[str, Any], where: str) -> int:
    return _int(
        _get(obj, "droppedAttributesCount", "dropped_attributes_count"), f"{where}.droppedAttributesCount", UINT32
    )


def _span_from_json(data: dict[str, Any]) -> Span:
    name = _text(data.get("name"), "span name")
    where = f"span {name!r}"
    status = _object(data.get("status"), f"{where}.status")
    return Span(
        trace_id=_hex_id(_get(data, "traceId", "trace_id"), 16, f"{where} traceId"),
        span_id=_hex_id(_get(data, "spanId", "span_id"), 8, f"{where} spanId"),
        parent_span_id=_hex_id(_get(data, "parentSpanId", "parent_span_id"), 8, f"{where} parentSpanId"),
        trace_state=_text(_get(data, "traceState", "trace_state"), f"{where}.traceState"),
        flags=_int(data.get("flags"), f"{where}.flags", UINT32),
        name=name,
        kind=_enum(data.get("kind"), _KINDS, f"{where}.kind"),
        start_time_unix_nano=_int(_get(data, "startTimeUnixNano", "start_time_unix_nano"), f"{where}.start", UINT64),
        end_time_unix_nano=_int(_get(data, "endTimeUnixNano", "end_time_unix_nano"), f"{where}.end", UINT64),
        attributes=_attributes(data, where=where),
        dropped_attributes_count=_dropped(data, where),
        events=[
            Span.Event(
                time_unix_nano=_int(_get(e, "timeUnixNano", "time_unix_nano"), f"{where}.event time", UINT64),
                name=_text(e.get("name"), f"{where}.event name"),
                attributes=_attributes(e, where=f"{where}.event"),
                dropped_attributes_count=_dropped(e, f"{where}.event"),
            )
            for e in _objects(data, "events", None, where)
        ],
        dropped_events_count=_int(_get(data, "droppedEventsCount", "dropped_events_count"), where, UINT32),
        links=[
            Span.Link(
                trace_id=_hex_id(_get(link, "traceId", "trace_id"), 16, f"{where} link traceId"),
                span_id=_hex_id(_get(link, "spanId", "span_id"), 8, f"{where} link spanId"),
                trace_state=_text(_get(link, "traceState", "trace_state"), f"{where} link traceState"),
                attributes=_attributes(link, where=f"{where}.link"),
                dropped_attributes_count=_dropped(link, f"{where}.link"),
                flags=_int(link.get("flags"), f"{where}.link.flags", UINT32),
            )
            for link in _objects(data, "links", None, where)
        ],
        dropped_links_count=_int(_get(data, "droppedLinksCount", "dropped_links_count"), where, UINT32),
        status=Status(
            message=_text(status.get("message"), f"{where}.status.message"),
            code=_enum(status.get("code"), _STATUS, f"{where}.status.code"),
        ),
    )


def request_from_json(document: dict[str, Any]) -> ExportTraceServiceRequest:
    """The protobuf request an OTLP/JSON document describes, leaving out spans that break a rule."""
    return _request_and_problems(document)[0]


def _request_and_problems(document: dict[str, Any]) -> tuple[ExportTraceServiceRequest, list[str]]:
    """The request, and why each span left out of it was rejected; a broken envelope raises `DecodeError`."""
    request = ExportTraceServiceRequest()
    problems: list[str] = []
    for resource_spans_json in _objects(document, "resourceSpans", "resource_spans", "request"):
        resource_json = _object(resource_spans_json.get("resource"), "resource")
        resource_spans = ResourceSpans(
            resource=Resource(
                attributes=_attributes(resource_json, where="resource"),
                dropped_attributes_count=_dropped(resource_json, "resource"),
            ),
            schema_url=_text(_get(resource_spans_json, "schemaUrl", "schema_url"), "resource schemaUrl"),
        )
        for scope_spans_json in _objects(resource_spans_json, "scopeSpans", "scope_spans", "resourceSpans[]"):
            scope_json = _object(scope_spans_json.get("scope"), "scope")
            scope_spans = ScopeSpans(
                scope=InstrumentationScope(
                    name=_text(scope_json.get("name"), "scope name"),
                    version=_text(scope_json.get("version"), "scope version"),
                    attributes=_attributes(scope_json, where="scope"),
                    dropped_attributes_count=_dropped(scope_json, "scope"),
                ),
                schema_url=_text(_get(scope_spans_json, "schemaUrl", "schema_url"), "scope schemaUrl"),
            )
            for span_json in _objects(scope_spans_json, "spans", None, "scopeSpans[]"):
                try:
                    scope_spans.spans.append(_span_from_json(span_json))
                except DecodeError as exc:
                    problems.append(_printable(str(exc)))
                except (ValueError, TypeError) as exc:  # protobuf refused a value: lone surrogates, ranges
                    problems.append(_printable(f"span {span_json.get('name')!r}: invalid value: {exc}"))
                except RecursionError:
                    problems.append(_printable(f"span {span_json.get('name')!r}: nested too deeply"))
            resource_spans.scope_spans.append(scope_spans)
        request.resource_spans.append(resource_spans)
    return request, problems


def _printable(message: str) -> str:
    return message.encode("utf-8", "backslashreplace").decode()  # the reason may quote a lone surrogate


__all__ = ["MAX_VALUE_DEPTH", "any_value_from_json", "decode_json", "request_from_json"]
