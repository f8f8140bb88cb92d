"""Property-based tests (hypothesis) of both OTLP decoders and the store round trip, bounded in examples and time.

- Any span the protobuf schema allows, sent as protobuf or as our OTLP/JSON, is stored and read back byte-equal.
- Any JSON document, and any byte flip of a valid protobuf body, decodes or raises `DecodeError`: nothing else.
- Whatever the decoders accept, the store takes (SQLite and PostgreSQL): a refused row is reported, never a crash.
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from lightning_otel.collector.receiving.json_decoding import decode_json
from lightning_otel.collector.receiving.otlp_decoding import DecodeError, decode_protobuf
from lightning_otel.collector.receiving.otlp_json import traces_data_json
from lightning_otel.collector.stores.store import StoredSpan
from lightning_otel.collector.stores.stores import open_store
from lightning_otel.testing.otlp_factory import make_request

BOUNDED = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

u64 = st.integers(0, 2**64 - 1)
u32 = st.integers(0, 2**32 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)  # any Unicode but lone surrogates
scalar_values = st.one_of(
    text.map(lambda s: AnyValue(string_value=s)),
    st.booleans().map(lambda b: AnyValue(bool_value=b)),
    i64.map(lambda n: AnyValue(int_value=n)),
    # one NaN (JSON's "NaN" cannot carry a NaN's payload bits), both infinities, every other double
    st.one_of(st.floats(allow_nan=False), st.just(math.nan)).map(lambda x: AnyValue(double_value=x)),
    st.binary(max_size=20).map(lambda b: AnyValue(bytes_value=b)),
    st.just(AnyValue()),
)
any_values = st.recursive(
    scalar_values,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda vs: AnyValue(array_value=ArrayValue(values=vs))),
        st.lists(st.tuples(text, inner), max_size=3).map(
            lambda kvs: AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=k, value=v) for k, v in kvs]))
        ),
    ),
    max_leaves=12,
)
attributes = st.lists(st.tuples(text, any_values), max_size=5).map(
    lambda kvs: [KeyValue(key=k, value=v) for k, v in kvs]
)
nonzero_id = st.binary(min_size=8, max_size=8).filter(any)


@st.composite
def spans(draw: st.DrawFn) -> Span:
    span = Span(
        trace_id=uuid.uuid4().bytes,  # unique per example: the store deduplicates on (trace_id, span_id)
        span_id=draw(nonzero_id),
        parent_span_id=draw(st.one_of(st.just(b""), nonzero_id)),
        trace_state=draw(text),
        flags=draw(u32),
        name=draw(text),
        kind=draw(i32),
        start_time_unix_nano=draw(u64),
        end_time_unix_nano=draw(u64),
        attributes=draw(attributes),
        dropped_attributes_count=draw(u32),
        dropped_events_count=draw(u32),
        dropped_links_count=draw(u32),
        status=Status(code=draw(i32), message=draw(text)),
    )
    for _ in range(draw(st.integers(0, 2))):
        span.events.add(time_unix_nano=draw(u64), name=draw(text), attributes=draw(attributes))
    for _ in range(draw(st.integers(0, 1))):
        span.links.add(trace_id=uuid.uuid4().bytes, span_id=draw(nonzero_id), trace_state=draw(text), flags=draw(u32))
    return span


def exact(span: Span) -> bytes:
    """Compared as bytes: message equality says NaN != NaN."""
    return span.SerializeToString(deterministic=True)


def as_json(batch: list[Span]) -> bytes:
    """The spans as our own OTLP/JSON writer renders them (what the Jaeger v3 API and `format=otlp` serve)."""
    stored = [
        StoredSpan(0, s.trace_id, s.span_id, s.parent_span_id, "svc", s.SerializeToString(), b"", b"") for s in batch
    ]
    return json.dumps(traces_data_json(stored)).encode()


@given(spans())
@BOUNDED
def test_any_schema_span_survives_both_decoders(span: Span) -> None:
    (from_protobuf,) = decode_protobuf(make_request([span]).SerializeToString()).records
    assert from_protobuf.span_bytes == exact(span)
    decoded = decode_json(as_json([span]))
    assert decoded.rejected == 0, decoded.errors
    assert decoded.records[0].span_bytes == exact(span)


json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=12),  # lone surrogates included
    st.sampled_from(["NaN", "Infinity", "-1", "18446744073709551616", "0" * 32, "zz" * 8, ""]),
)
json_keys = st.sampled_from(
    [
        "resourceSpans", "scopeSpans", "spans", "resource", "scope", "attributes", "key", "value", "traceId",
        "spanId", "parentSpanId", "name", "kind", "startTimeUnixNano", "endTimeUnixNano", "events", "links",
        "status", "code", "message", "intValue", "doubleValue", "stringValue", "boolValue", "bytesValue",
        "arrayValue", "kvlistValue", "values", "flags", "droppedAttributesCount", "timeUnixNano",
    ]
)  # fmt: skip
json_documents = st.recursive(
    json_leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(json_keys, inner, max_size=5)),
    max_leaves=30,
)


@given(json_documents)
@BOUNDED
def test_any_json_document_decodes_or_is_a_decode_error(document: object) -> None:
    body = json.dumps(document).encode()
    try:
        decoded = decode_json(body)
    except DecodeError as error:
        assert str(error)
        return
    assert decoded.rejected == len(decoded.errors)
    for record in decoded.records:
        Span.FromString(record.span_bytes)  # what was accepted parses back


def paths(node: object, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        yield from paths(child, (*prefix, key))


def replaced(node: object, path: tuple, value: object) -> object:
    if not path:
        return value
    copy = dict(node) if isinstance(node, dict) else list(node)  # type: ignore[call-overload]
    copy[path[0]] = replaced(copy[path[0]], path[1:], value)
    return copy


@given(spans(), st.data())
@BOUNDED
def test_any_node_of_a_valid_json_request_replaced_decodes_or_is_a_decode_error(
    span: Span, data: st.DataObject
) -> None:
    """Structure-aware fuzzing: one node of a real request (a field, a list entry, a whole span) becomes any JSON."""
    document = json.loads(as_json([span]))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(list(paths(document))))
        document = replaced(document, path, data.draw(json_documents))
    test_any_json_document_decodes_or_is_a_decode_error.hypothesis.inner_test(document)  # type: ignore[attr-defined]


@given(spans(), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), min_size=1, max_size=4))
@BOUNDED
def test_byte_flips_of_a_protobuf_body_decode_or_are_a_decode_error(span: Span, flips: list[tuple[int, int]]) -> None:
    body = bytearray(make_request([span]).SerializeToString())
    for position, bit in flips:
        body[position % len(body)] ^= 1 << bit
    try:
        decoded = decode_protobuf(bytes(body))
    except DecodeError:
        return
    for record in decoded.records:
        Span.FromString(record.span_bytes)


@pytest.fixture
def running_store(store_url: str) -> Iterator[tuple[object, asyncio.AbstractEventLoop]]:
    loop = asyncio.new_event_loop()
    store = open_store(store_url)
    loop.run_until_complete(store.start())
    try:
        yield store, loop
    finally:
        loop.run_until_complete(store.close())
        loop.close()


@given(st.lists(spans(), min_size=1, max_size=4), st.data())
@settings(BOUNDED, max_examples=40)
def test_the_store_round_trip_is_exact(running_store, batch: list[Span], data: st.DataObject) -> None:
    store, loop = running_store
    body = make_request(batch).SerializeToString()
    records = (decode_json(as_json(batch)) if data.draw(st.booleans()) else decode_protobuf(body)).records
    result = loop.run_until_complete(store.write(records))
    assert (result.inserted, result.rejected) == (len(batch), [])
    for span in batch:
        (stored,) = loop.run_until_complete(store.trace_spans(span.trace_id))
        assert stored.span_bytes == exact(span)
