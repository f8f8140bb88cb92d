"""OTLP protobuf encoding that stays cheap for spans carrying long numeric arrays (token ids, logprobs).

The OpenTelemetry encoder builds one protobuf `AnyValue` object per array element, about 1.2 µs each: a call with
~1,400 token ids and logprobs costs ~1.7 ms of CPU in the export thread, which competes with the agent for the
GIL. Here every int or float array of `MIN_FAST_ARRAY` elements or more is written as protobuf wire bytes
directly (cached bytes per token id; `struct` for doubles, ~30-70 ns per element) and merged into the span
message; everything else goes through the OpenTelemetry encoder unchanged. The message is the same as the
OpenTelemetry encoder's, except that those attributes come last in the span's attribute list.

The exporters we construct use it (`lightning_otel.capture.otlp_exporters`); nothing else in the process does.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from itertools import chain, repeat
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as otel_encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan

MIN_FAST_ARRAY = 16

_INT64_MASK = (1 << 64) - 1
_SPAN_ATTRIBUTES_TAG = b"\x4a"  # Span.attributes = 9, length-delimited
_DOUBLE_ELEMENT = b"\x0a\x09\x21"  # ArrayValue.values (1, 9 bytes) holding AnyValue.double_value (4, fixed64)
_DOUBLES_PER_STRUCT = 64
_DOUBLES = struct.Struct("<" + "3sd" * _DOUBLES_PER_STRUCT)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int_element(value: int) -> bytes:
    """`ArrayValue.values` entry holding `AnyValue.int_value` (3, varint of the int64)."""
    any_value = b"\x18" + _varint(value & _INT64_MASK)
    return b"\x0a" + _varint(len(any_value)) + any_value


class _IntElements(dict[int, bytes]):
    """Encoded array entries by value; token ids repeat, so most lookups hit. Bounded to small ints."""

    def __missing__(self, value: int) -> bytes:
        encoded = _int_element(value)
        if 0 <= value < 1 << 21:
            self[value] = encoded
        return encoded


_int_elements = _IntElements()


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


def _length_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def numeric_array_kind(values: Sequence[Any]) -> type | None:
    """`int` or `float` when every element has exactly that type (one C-level pass), else None: bools, strings,
    None elements, mixed or empty arrays are left to OpenTelemetry's own validation and encoding."""
    kinds = set(map(type, values))
    if kinds == {int}:
        return int
    if kinds == {float}:
        return float
    return None


def encode_array_attribute(key: str, values: Sequence[Any]) -> bytes | None:
    """One `Span.attributes` field (tag included) for an all-int or all-float array, else None."""
    kind = numeric_array_kind(values)
    if kind is int:
        elements = b"".join(map(_int_elements.__getitem__, values))
    elif kind is float:
        elements = _doubles(values)
    else:
        return None
    any_value = _length_delimited(b"\x2a", elements)  # AnyValue.array_value = 5
    key_value = _length_delimited(b"\x0a", key.encode()) + _length_delimited(b"\x12", any_value)
    return _length_delimited(_SPAN_ATTRIBUTES_TAG, key_value)


def _split_span(span: ReadableSpan) -> tuple[ReadableSpan, list[bytes]]:
    """The span without its long numeric arrays, and those arrays encoded."""
    attributes: Mapping[str, Any] = span.attributes or {}
    encoded: dict[str, bytes] = {}
    for key, value in attributes.items():
        if isinstance(value, (tuple, list)) and len(value) >= MIN_FAST_ARRAY:
            field = encode_array_attribute(key, value)
            if field is not None:
                encoded[key] = field
    if not encoded:
        return span, []
    slim = ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes={key: value for key, value in attributes.items() if key not in encoded},
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
    return slim, list(encoded.values())


def encode_spans(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """`ExportTraceServiceRequest` for `spans`, like OpenTelemetry's `encode_spans`."""
    slim_spans: list[ReadableSpan] = []
    pending: dict[tuple[int, int], tuple[ReadableSpan, list[bytes]]] = {}
    for span in spans:
        slim, fields = _split_span(span)
        slim_spans.append(slim)
        if fields and span.context is not None:
            pending[(span.context.trace_id, span.context.span_id)] = (span, fields)
    request = otel_encode_spans(slim_spans)
    if not pending:
        return request
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for message in scope_spans.spans:
                entry = pending.get((int.from_bytes(message.trace_id, "big"), int.from_bytes(message.span_id, "big")))
                if entry is None:
                    continue
                original, fields = entry
                message.MergeFromString(b"".join(fields))  # repeated field entries append
                # The slim copy lost the SDK's bounded containers, and with them the dropped counts.
                message.dropped_attributes_count = original.dropped_attributes
                message.dropped_events_count = original.dropped_events
                message.dropped_links_count = original.dropped_links
    return request
