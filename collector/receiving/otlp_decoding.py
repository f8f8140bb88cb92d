"""OTLP trace requests in, validated span records out: protobuf here, JSON by our own walk (`json_decoding`).

`google.protobuf.json_format.Parse` silently reads OTLP/JSON's hex ids as base64, so JSON is walked here: ids are
hex (any case, nothing else: no spaces, signs or `0x`), enums are integers (names accepted too), 64-bit integers may
be strings, keys may be lowerCamelCase or snake_case, unknown fields are ignored.

Every integer is checked against its field's range (uint64 times, uint32 counts, fixed32 flags, int32 enums, int64
values), strings must be valid Unicode, bytes base64, values nested at most `MAX_VALUE_DEPTH` levels (deeper values
could not be parsed back by protobuf). A span that breaks a rule is rejected on its own and reported through
`partial_success`, the rest are kept; a request whose envelope (resource, scope, lists) breaks one raises
`DecodeError` (HTTP 400). Nothing in a body can make decoding fail any other way.

What a stored span is indexed by is normalised so that every database can hold it (`_index_columns`): times
beyond int64 are capped, enum values beyond int16 are capped, NUL characters in indexed strings become U+FFFD.
The span's own bytes, which every read returns, are kept exactly as sent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from lightning_otel import semconv
from lightning_otel.collector.stores.span_record import SpanRecord


class DecodeError(ValueError):
    """The request body is not a decodable OTLP trace request."""


@dataclass(slots=True)
class DecodedRequest:
    records: list[SpanRecord]
    rejected: int
    errors: list[str]

    @property
    def error_message(self) -> str:
        shown = "; ".join(self.errors[:5])
        more = f" (and {len(self.errors) - 5} more)" if len(self.errors) > 5 else ""
        return f"{self.rejected} span(s) rejected: {shown}{more}" if self.rejected else ""


# --- protobuf --------------------------------------------------------------------------------------------------
def decode_protobuf(body: bytes) -> DecodedRequest:
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except Exception as exc:  # protobuf raises DecodeError and, on some inputs, other errors
        raise DecodeError(f"invalid OTLP protobuf: {exc}") from exc
    return records_of(request)


def records_of(request: ExportTraceServiceRequest) -> DecodedRequest:
    records: list[SpanRecord] = []
    errors: list[str] = []
    for resource_spans in request.resource_spans:
        resource = resource_spans.resource
        resource_bytes = resource.SerializeToString(deterministic=True)
        service = _service_name(resource)
        rollout = _resource_rollout(resource)
        for scope_spans in resource_spans.scope_spans:
            scope_bytes = scope_spans.scope.SerializeToString(deterministic=True)
            scope_digest = hashlib.blake2b(resource_bytes + b"\0" + scope_bytes, digest_size=16).digest()
            for span in scope_spans.spans:
                problem = _id_problem(span)
                if problem:
                    errors.append(problem)
                    continue
                record = _record(span, service, resource_bytes, scope_bytes, scope_digest)
                if record.rollout_id is None and rollout[0] is not None:
                    record.rollout_id, record.attempt_id = rollout
                records.append(record)
    return DecodedRequest(records, len(errors), errors)


def _id_problem(span: Span) -> str | None:
    if len(span.trace_id) != 16 or not any(span.trace_id):
        return f"span {span.name!r}: trace_id must be 16 non-zero bytes, got {len(span.trace_id)} bytes"
    if len(span.span_id) != 8 or not any(span.span_id):
        return f"span {span.name!r}: span_id must be 8 non-zero bytes, got {len(span.span_id)} bytes"
    if span.parent_span_id and len(span.parent_span_id) != 8:
        return f"span {span.name!r}: parent_span_id must be empty or 8 bytes, got {len(span.parent_span_id)}"
    return None


def _service_name(resource: Resource) -> str:
    for attribute in resource.attributes:
        if attribute.key == "service.name":
            return attribute.value.string_value
    return "unknown_service"


def _resource_rollout(resource: Resource) -> tuple[str | None, str | None]:
    """The rollout a process's resource names: a harness started with `OTEL_RESOURCE_ATTRIBUTES=agl.rollout.id=...,
    agl.attempt.id=...` (lightning_otel.harness) has every span it exports in that rollout, whatever it records."""
    found: list[str | None] = [None, None]
    for attribute in resource.attributes:
        slot = _INDEXED.get(attribute.key)
        if slot is not None and slot < 2 and attribute.value.HasField("string_value"):
            found[slot] = _index_text(attribute.value.string_value)
    return found[0], found[1]


_INDEXED = {
    semconv.AGL_ROLLOUT_ID: 0,
    semconv.AGL_ATTEMPT_ID: 1,
    semconv.GEN_AI_AGENT_NAME: 2,
    semconv.GEN_AI_OPERATION_NAME: 3,
}


INT64_MAX = 2**63 - 1
_INT16 = (-(2**15), 2**15 - 1)


def _index_text(text: str) -> str:
    # PostgreSQL's text cannot hold NUL; SQLite's can, but both stores must index a span the same way.
    return text.replace("\0", "\ufffd") if "\0" in text else text


def _index_enum(value: int) -> int:
    return min(max(value, _INT16[0]), _INT16[1])  # kind and status are SMALLINT columns; real values are 0..5


def _record(span: Span, service: str, resource_bytes: bytes, scope_bytes: bytes, scope_digest: bytes) -> SpanRecord:
    # The ingest hot path (~10 us a span): one pass over the attributes, positional construction.
    indexed: list[str | None] = [None, None, None, None]
    for attribute in span.attributes:
        slot = _INDEXED.get(attribute.key)
        if slot is not None:
            value = attribute.value
            if value.HasField("string_value"):
                indexed[slot] = _index_text(value.string_value)
    return SpanRecord(
        span.trace_id,
        span.span_id,
        span.parent_span_id,
        _index_text(span.name),
        _index_enum(span.kind),
        min(span.start_time_unix_nano, INT64_MAX),  # fixed64 on the wire, BIGINT in the databases
        min(span.end_time_unix_nano, INT64_MAX),
        _index_enum(span.status.code),
        _index_text(service),
        indexed[0],
        indexed[1],
        indexed[2],
        indexed[3],
        span.SerializeToString(deterministic=True),
        resource_bytes,
        scope_bytes,
        scope_digest,
    )


def iter_spans(request: ExportTraceServiceRequest) -> Iterator[Span]:
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            yield from scope_spans.spans
