"""OTLP protobuf encoding of finished spans, written as wire bytes: the same request OpenTelemetry's encoder builds.

OpenTelemetry's encoder builds a protobuf object for every span, attribute and array element, then serializes
them: ~75 us of CPU for each span a runner exports (an LLM span carries ~15 attributes and its token ids), 93% of
a runner's export and about 6% of its CPU (`benchmarks/trainer_throughput.py`'s agent, 10 spans a rollout). Here
the request is written directly: an attribute key's field cached once, ints as varints, doubles with `struct`,
all-int and all-float arrays (token ids, logprobs) from cached per-id bytes or one `struct` pack.

The request is the one OpenTelemetry's `encode_spans` builds (1.44, 1.45): spans grouped by resource, then by
instrumentation scope, in first-seen order; the same fields set; an attribute that cannot be encoded (a type OTLP
has no value for, an int past int64, an unencodable string) dropped with the same log line. `tests/
test_otlp_encoding.py` compares both on every attribute kind, events, links, limits and trace state. Our exporters
use it (`lightning_otel.capture.otlp_exporters`, version-gated); nothing else in the process does.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from itertools import chain, repeat
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan

logger = logging.getLogger(__name__)

MIN_FAST_ARRAY = 4  # shorter numeric arrays go element by element (the fast path's set-up costs more)

_INT64_MIN, _INT64_LIMIT, _INT64_MASK = -(1 << 63), 1 << 63, (1 << 64) - 1
_DOUBLE_ELEMENT = b"\x0a\x09\x21"  # ArrayValue.values (1, 9 bytes) holding AnyValue.double_value (4, fixed64)
_DOUBLES_PER_STRUCT = 64
_DOUBLES = struct.Struct("<" + "3sd" * _DOUBLES_PER_STRUCT)
_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")
_FIXED32 = struct.Struct("<I")
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200  # SpanFlags: the context says whether it is remote, and it is
_SPAN_FLAGS_TAG = b"\x85\x01"  # Span.flags = 16, fixed32
_KEY_CACHE_LIMIT = 4096


def _varint_of(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# Lengths and small ints, one or two bytes each (built directly: ~3 ms at import, half of `_varint_of`'s).
_SHORT_VARINTS = [bytes((value,)) for value in range(1 << 7)] + [
    bytes((value & 0x7F | 0x80, value >> 7)) for value in range(1 << 7, 1 << 14)
]


def _varint(value: int) -> bytes:
    return _SHORT_VARINTS[value] if 0 <= value < 1 << 14 else _varint_of(value)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag + _varint(len(payload)) + payload


def _int64(value: int) -> bytes:
    if not _INT64_MIN <= value < _INT64_LIMIT:
        raise ValueError(f"Value out of range: {value}")  # what protobuf says of it
    return _varint(value & _INT64_MASK)


def _int_element(value: int) -> bytes:
    """`ArrayValue.values` entry holding `AnyValue.int_value` (3, varint of the int64)."""
    any_value = b"\x18" + _varint_of(value & _INT64_MASK)
    return b"\x0a" + _varint(len(any_value)) + any_value


class _IntElements(dict[int, bytes]):
    """Encoded array entries by value; token ids repeat, so most lookups hit. Bounded to small ints."""

    def __missing__(self, value: int) -> bytes:
        encoded = _int_element(value)
        if 0 <= value < 1 << 21:
            self[value] = encoded
        return encoded


_int_elements = _IntElements()


class _Keys(dict[str, bytes]):
    """`KeyValue.key` fields by key: attribute names repeat on every span."""

    def __missing__(self, key: str) -> bytes:
        encoded = _field(b"\x0a", key.encode("utf-8"))
        if len(self) < _KEY_CACHE_LIMIT:
            self[key] = encoded
        return encoded


_keys = _Keys()


def _doubles(values: Sequence[float]) -> bytes:
    values = list(values)
    full = len(values) - len(values) % _DOUBLES_PER_STRUCT
    parts = [
        _DOUBLES.pack(*chain.from_iterable(zip(repeat(_DOUBLE_ELEMENT), values[start : start + _DOUBLES_PER_STRUCT])))
        for start in range(0, full, _DOUBLES_PER_STRUCT)
    ]
    rest = values[full:]
    parts.append(struct.pack("<" + "3sd" * len(rest), *chain.from_iterable(zip(repeat(_DOUBLE_ELEMENT), rest))))
    return b"".join(parts)


def numeric_array_kind(values: Sequence[Any]) -> type | None:
    """`int` or `float` when every element has exactly that type (one C-level pass), else None: bools, strings,
    None elements, mixed or empty arrays are left to OpenTelemetry's own validation and encoding."""
    kinds = set(map(type, values))
    if kinds == {int}:
        return int
    if kinds == {float}:
        return float
    return None


def _array_elements(values: Sequence[Any]) -> bytes:
    """`ArrayValue`'s payload."""
    if len(values) >= MIN_FAST_ARRAY:
        kind = numeric_array_kind(values)
        if kind is int and min(values) >= _INT64_MIN and max(values) < _INT64_LIMIT:
            return b"".join(map(_int_elements.__getitem__, values))
        if kind is float:
            return _doubles(values)
    return b"".join(_field(b"\x0a", _any_value(value)) for value in values)


def _any_value(value: Any) -> bytes:
    """`AnyValue`'s payload, as OpenTelemetry's `_encode_value` chooses the field (its isinstance order)."""
    kind = type(value)
    if kind is str:
        return _field(b"\x0a", value.encode("utf-8"))
    if kind is int:
        return b"\x18" + _int64(value)
    if kind is float:
        return b"\x21" + _DOUBLE.pack(value)
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode("utf-8"))
    if isinstance(value, int):
        return b"\x18" + _int64(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        return _field(b"\x2a", _array_elements(value))
    if isinstance(value, Mapping):
        return _field(b"\x32", b"".join(_field(b"\x0a", _key_value(str(k), v)) for k, v in value.items()))
    raise Exception(f"Invalid type {type(value)} of value {value}")


def _key_value(key: str, value: Any) -> bytes:
    return _keys[key] + _field(b"\x12", _any_value(value))


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None) -> list[bytes]:
    """One `tag` field per attribute; one that cannot be encoded is dropped and logged, as OpenTelemetry does."""
    fields = []
    for key, value in (attributes or {}).items():
        try:
            fields.append(_field(tag, _key_value(key, value)))
        except Exception as error:
            logger.exception("Failed to encode key %s: %s", key, error)
    return fields


def _flags(context: Any) -> bytes:
    return _FIXED32.pack(_HAS_IS_REMOTE | _IS_REMOTE if context is not None and context.is_remote else _HAS_IS_REMOTE)


def _span(span: ReadableSpan) -> bytes:
    """`Span`'s payload."""
    context = span.get_span_context()
    parts = [b"\x0a\x10", context.trace_id.to_bytes(16, "big"), b"\x12\x08", context.span_id.to_bytes(8, "big")]
    if context.trace_state:
        parts.append(_field(b"\x1a", ",".join(f"{k}={v}" for k, v in context.trace_state.items()).encode()))
    if span.parent:
        parts += (b"\x22\x08", span.parent.span_id.to_bytes(8, "big"))
    if span.name:
        parts.append(_field(b"\x2a", span.name.encode("utf-8")))
    parts += (b"\x30", _varint(span.kind.value + 1))  # SDK kinds count from INTERNAL = 0, OTLP's from 1
    if span.start_time:
        parts += (b"\x39", _FIXED64.pack(span.start_time))
    if span.end_time:
        parts += (b"\x41", _FIXED64.pack(span.end_time))
    parts += _attributes(b"\x4a", span.attributes)
    if span.dropped_attributes:
        parts += (b"\x50", _varint(span.dropped_attributes))
    for event in span.events:
        event_parts = [b"\x09", _FIXED64.pack(event.timestamp)] if event.timestamp else []
        if event.name:
            event_parts.append(_field(b"\x12", event.name.encode("utf-8")))
        event_parts += _attributes(b"\x1a", event.attributes)
        if event.dropped_attributes:
            event_parts += (b"\x20", _varint(event.dropped_attributes))
        parts.append(_field(b"\x5a", b"".join(event_parts)))
    if span.dropped_events:
        parts += (b"\x60", _varint(span.dropped_events))
    for link in span.links:
        linked = link.context
        link_parts = [b"\x0a\x10", linked.trace_id.to_bytes(16, "big"), b"\x12\x08", linked.span_id.to_bytes(8, "big")]
        link_parts += _attributes(b"\x22", link.attributes)
        if link.dropped_attributes:
            link_parts += (b"\x28", _varint(link.dropped_attributes))
        link_parts += (b"\x35", _flags(linked))
        parts.append(_field(b"\x6a", b"".join(link_parts)))
    if span.dropped_links:
        parts += (b"\x70", _varint(span.dropped_links))
    status = span.status
    if status is not None:
        status_parts = [_field(b"\x12", status.description.encode("utf-8"))] if status.description else []
        if status.status_code.value:
            status_parts += (b"\x18", _varint(status.status_code.value))
        parts.append(_field(b"\x7a", b"".join(status_parts)))
    parts += (_SPAN_FLAGS_TAG, _flags(span.parent))
    return b"".join(parts)


def _scope(scope: Any) -> bytes:
    """`InstrumentationScope`'s payload (empty for None, as OpenTelemetry sends it)."""
    if scope is None:
        return b""
    parts = []
    if scope.name:
        parts.append(_field(b"\x0a", scope.name.encode("utf-8")))
    if scope.version:
        parts.append(_field(b"\x12", scope.version.encode("utf-8")))
    parts += _attributes(b"\x1a", scope.attributes)
    return b"".join(parts)


def encode_request(spans: Sequence[ReadableSpan]) -> bytes:
    """The serialized `ExportTraceServiceRequest` for `spans`."""
    grouped: dict[Any, dict[Any, list[bytes]]] = {}
    by_identity: dict[int, dict[Any, list[bytes]]] = {}  # a Resource hashes by dumping its attributes to JSON
    for span in spans:
        by_scope = by_identity.get(id(span.resource))
        if by_scope is None:
            by_scope = by_identity[id(span.resource)] = grouped.setdefault(span.resource, {})
        by_scope.setdefault(span.instrumentation_scope or None, []).append(_field(b"\x12", _span(span)))
    request = []
    for resource, by_scope in grouped.items():
        resource_parts = [_field(b"\x0a", b"".join(_attributes(b"\x0a", resource.attributes)))]
        for scope, encoded in by_scope.items():
            scope_parts = [_field(b"\x0a", _scope(scope)), *encoded]
            if scope is not None and scope.schema_url:
                scope_parts.append(_field(b"\x1a", scope.schema_url.encode("utf-8")))
            resource_parts.append(_field(b"\x12", b"".join(scope_parts)))
        if resource.schema_url:
            resource_parts.append(_field(b"\x1a", resource.schema_url.encode("utf-8")))
        request.append(_field(b"\x0a", b"".join(resource_parts)))
    return b"".join(request)


def encode_spans(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """`ExportTraceServiceRequest` for `spans`, like OpenTelemetry's `encode_spans` (for the gRPC exporter, which
    sends a message): our bytes, parsed."""
    return ExportTraceServiceRequest.FromString(encode_request(spans))
