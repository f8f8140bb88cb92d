"""Every value the OTLP schema allows is stored and read back as sent; everything else is a 400 (or a rejected span)
with a message, never a 500 or a hang; the writer survives what it cannot store. Both stores."""

from __future__ import annotations

import gzip
import json
import math
import socket
import threading
import time
from collections import Counter
from urllib.parse import quote

import httpx
import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from lightning_otel.collector.client import Client
from lightning_otel.testing.otlp_factory import make_request, make_span, span_id, trace_id
from tests.collector.helpers import PB

JS = {"content-type": "application/json"}
U64 = 2**64 - 1
U32 = 2**32 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1


@pytest.fixture
def collector(start_collector, store_url: str):
    return start_collector(store_url=store_url, max_body_bytes=4 << 20)


@pytest.fixture
def sqlite_collector(start_collector):
    """For the decoder's cases: what reaches the store is covered on both stores by the tests above."""
    return start_collector(max_body_bytes=4 << 20)


def export(collector, spans: list[Span]) -> httpx.Response:
    body = make_request(spans).SerializeToString()
    return httpx.post(collector.addresses.otlp_http + "/v1/traces", content=body, headers=PB, timeout=30)


def stored(collector, trace: int) -> list[Span]:
    spans = collector.run(collector.store.trace_spans(trace_id(trace)))
    return [Span.FromString(s.span_bytes) for s in spans]


def healthy(collector) -> bool:
    response = httpx.get(collector.addresses.query + "/healthz")
    return response.status_code == 200 and response.json()["status"] == "ok"


def boundary_spans(trace: int) -> list[Span]:
    """One span per extreme value of every integer field of a span (and its events and links)."""
    spans: list[Span] = []

    def add(**fields: object) -> Span:
        span = Span(trace_id=trace_id(trace), span_id=span_id(len(spans) + 1), name=f"boundary {len(spans)}")
        for key, value in fields.items():
            if key == "status_code":
                span.status.CopyFrom(Status(code=value))  # type: ignore[arg-type]
            else:
                setattr(span, key, value)
        spans.append(span)
        return span

    for value in (0, 1, 2**53 + 1, 2**63 - 1, 2**63, U64 - 1, U64):  # fixed64 times
        add(start_time_unix_nano=value, end_time_unix_nano=value)
    add(start_time_unix_nano=U64, end_time_unix_nano=0)  # ends before it starts: stored as sent
    for value in (0, U32):  # fixed32 flags, uint32 counts
        add(flags=value, dropped_attributes_count=value, dropped_events_count=value, dropped_links_count=value)
    for value in (I32_MIN, -1, 0, 5, 6, I32_MAX):  # open enums: any int32 is legal on the wire
        add(kind=value, status_code=value)
    span = add()
    span.events.add(time_unix_nano=U64, name="", dropped_attributes_count=U32)
    span.links.add(trace_id=trace_id(1), span_id=span_id(1), flags=U32, dropped_attributes_count=U32)
    span = add()
    for key, value in (("min", I64_MIN), ("max", I64_MAX), ("zero", 0)):
        span.attributes.add(key=key, value=AnyValue(int_value=value))
    return spans


def test_every_boundary_integer_is_stored_and_read_back_as_sent(collector) -> None:
    sent = boundary_spans(0xB0)
    response = export(collector, sent)
    assert response.status_code == 200, response.content
    assert sorted(stored(collector, 0xB0), key=lambda s: s.span_id) == sorted(sent, key=lambda s: s.span_id)
    assert export(collector, [make_span(0xB1, 1)]).status_code == 200  # the writer is still there
    assert len(stored(collector, 0xB1)) == 1 and healthy(collector)


def test_the_boundary_values_read_back_through_every_api(collector) -> None:
    sent = [
        make_span(0xB2, 1, rollout="r-b", attributes={"big": I64_MAX, "small": I64_MIN}),
        Span(
            trace_id=trace_id(0xB2),
            span_id=span_id(2),
            name="late",
            start_time_unix_nano=U64,
            end_time_unix_nano=U64,
            attributes=[KeyValue(key="agl.rollout.id", value=AnyValue(string_value="r-b"))],
        ),
    ]
    assert export(collector, sent).status_code == 200
    query = collector.addresses.query
    otlp = httpx.get(query + "/v1/rollouts/r-b/spans", params={"format": "otlp"}).json()
    times = [s["startTimeUnixNano"] for s in otlp["resourceSpans"][0]["scopeSpans"][0]["spans"]]
    assert str(U64) in times
    flat = Client(query).rollout_spans("r-b")
    assert {s["name"]: s["startTimeUnixNano"] for s in flat}["late"] == U64
    assert flat[0]["attributes"]["big"] == I64_MAX and flat[0]["attributes"]["small"] == I64_MIN
    for path in ("/api/traces/" + trace_id(0xB2).hex(), "/api/v3/traces/" + trace_id(0xB2).hex()):
        assert httpx.get(query + path).status_code == 200, path


def test_empty_huge_and_nul_strings_are_stored_as_sent(collector) -> None:
    huge = "x" * 1_000_000
    sent = [
        make_span(
            0xC0, 1, name="", rollout="r-s", attributes={"empty": "", "huge": huge, "nul": "a\0b", "emoji": "🙂"}
        ),
        make_span(0xC0, 2, name="nul\0in name", rollout="r-s\0x", agent="a\0b", operation="chat"),
    ]
    assert export(collector, sent).status_code == 200
    assert sorted(stored(collector, 0xC0), key=lambda s: s.span_id) == sent
    (flat,) = Client(collector.addresses.query).rollout_spans("r-s")
    assert flat["attributes"]["huge"] == huge and flat["attributes"]["nul"] == "a\0b"


NON_FINITE = [math.nan, math.inf, -math.inf]


def test_non_finite_doubles_cross_every_read_api(collector) -> None:
    logprobs = [-0.5, math.nan, -math.inf, math.inf, -1e-300]
    span = make_span(
        0xD0,
        1,
        rollout="r-nan",
        operation="chat",
        attributes={"agl.llm.response_logprobs": logprobs, "score": math.nan},
    )
    span.events.add(name="e", attributes=[KeyValue(key="v", value=AnyValue(double_value=-math.inf))])
    span.attributes.add(
        key="mixed",
        value=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="NaN"), AnyValue(double_value=math.inf)])),
    )
    assert export(collector, [span]).status_code == 200
    client = Client(collector.addresses.query)

    def check(flat: dict) -> None:
        attributes = flat["attributes"]
        assert [repr(x) for x in attributes["agl.llm.response_logprobs"]] == [repr(x) for x in logprobs]
        assert math.isnan(attributes["score"])
        assert attributes["mixed"] == ["NaN", math.inf]  # a string "NaN" stays a string
        assert flat["events"][0]["attributes"]["v"] == -math.inf

    (one,) = client.rollout_spans("r-nan")
    check(one)
    (batch,) = client.rollouts_spans(["r-nan"])["r-nan"]
    check(batch)
    query = collector.addresses.query
    otlp = httpx.get(query + "/v1/rollouts/r-nan/spans", params={"format": "otlp"})
    assert otlp.status_code == 200
    (attribute,) = [
        a for a in otlp.json()["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"] if a["key"] == "score"
    ]
    assert attribute["value"] == {"doubleValue": "NaN"}
    hex_id = trace_id(0xD0).hex()
    v1 = httpx.get(query + f"/api/traces/{hex_id}")
    assert v1.status_code == 200
    tags = {t["key"]: t for t in v1.json()["data"][0]["spans"][0]["tags"]}
    assert tags["score"] == {"key": "score", "type": "float64", "value": "NaN"}
    for path, params in (
        ("/api/traces", {"service": "svc"}),
        (f"/api/v3/traces/{hex_id}", {}),
        (
            "/api/v3/traces",
            {
                "query.service_name": "svc",
                "query.start_time_min": "2000-01-01T00:00:00Z",
                "query.start_time_max": "2200-01-01T00:00:00Z",
            },
        ),
    ):
        response = httpx.get(query + path, params=params)
        assert response.status_code == 200, (path, response.text)


def test_a_store_error_caused_by_one_span_rejects_that_span_and_keeps_the_rest(collector, store_url: str) -> None:
    """A database-side failure on one row (here a trigger, as a constraint or a bug would) must not kill the writer
    or fail the whole batch: the span is rejected in partial_success, counted and logged, the rest are stored."""
    poison_trigger(collector, store_url)
    response = export(
        collector, [make_span(0xE0, 1, name="fine"), make_span(0xE0, 2, name="poison"), make_span(0xE0, 3)]
    )
    assert response.status_code == 200
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 1 and "poison" in partial.error_message
    assert sorted(s.span_id for s in stored(collector, 0xE0)) == [span_id(1), span_id(3)]
    assert export(collector, [make_span(0xE1, 1)]).status_code == 200
    assert len(stored(collector, 0xE1)) == 1 and healthy(collector)
    metrics = httpx.get(collector.addresses.query + "/metrics").text
    assert "agl_collector_spans_quarantined_total 1.0" in metrics


def poison_trigger(collector, store_url: str) -> None:
    if store_url.startswith("sqlite"):
        import sqlite3

        connection = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        connection.execute(
            "CREATE TRIGGER poison BEFORE INSERT ON agl_spans WHEN NEW.name = 'poison' "
            "BEGIN SELECT RAISE(ABORT, 'poison span refused'); END"
        )
        connection.commit()
        connection.close()
        return
    import psycopg

    with psycopg.connect(store_url, autocommit=True) as connection:
        connection.execute(
            "CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN IF NEW.name = 'poison' THEN "
            "RAISE EXCEPTION 'poison span refused' USING ERRCODE = 'check_violation'; END IF; RETURN NEW; END $$ "
            "LANGUAGE plpgsql"
        )
        connection.execute("CREATE TRIGGER poison BEFORE INSERT ON agl_spans FOR EACH ROW EXECUTE FUNCTION poison()")


def test_a_writer_that_cannot_continue_is_reported_and_exports_get_503(start_collector, tmp_path) -> None:
    """The database file vanishes under a running collector and its connection dies: exports are answered 503 (the
    exporter retries) instead of hanging or being lost, /healthz says why; when the file is back, both recover."""
    path = tmp_path / "w.sqlite3"
    collector = start_collector(store_url=f"sqlite:///{path}")
    assert export(collector, [make_span(0xF0, 1)]).status_code == 200
    path.rename(tmp_path / "moved.sqlite3")
    path.mkdir()  # where the database was, something SQLite cannot open
    collector.store._write_connection.close()  # white box: the writer's connection dies
    for span in (2, 3):
        response = export(collector, [make_span(0xF0, span)])
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
    health = httpx.get(collector.addresses.query + "/healthz")
    assert health.status_code == 503 and health.json()["status"] == "unavailable", health.text
    assert "unable to open" in health.json()["problem"]
    path.rmdir()
    (tmp_path / "moved.sqlite3").rename(path)
    assert healthy(collector)
    assert export(collector, [make_span(0xF0, 2)]).status_code == 200
    assert [s.span_id for s in stored(collector, 0xF0)] == [span_id(1), span_id(2)]


# --- OTLP/JSON: everything outside the schema is a 400 or a rejected span -------------------------------------
def json_span(**fields: object) -> dict:
    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "j"}
    span.update(fields)
    return span


def json_request(*spans: dict, resource: dict | None = None, scope: dict | None = None) -> bytes:
    return json.dumps(
        {"resourceSpans": [{"resource": resource or {}, "scopeSpans": [{"scope": scope or {}, "spans": list(spans)}]}]}
    ).encode()


def post_json(collector, body: bytes, headers: dict | None = None) -> httpx.Response:
    return httpx.post(collector.addresses.otlp_http + "/v1/traces", content=body, headers={**JS, **(headers or {})})


def int_attribute(value: object) -> dict:
    return {"attributes": [{"key": "n", "value": {"intValue": value}}]}


OUT_OF_SCHEMA_SPANS = {
    "int64 attribute too big": int_attribute(str(2**63)),
    "int64 attribute too small": int_attribute(str(-(2**63) - 1)),
    "the JS exporter's double as intValue": int_attribute(1.7976931348623157e308),
    "fractional intValue": int_attribute(1.5),
    "negative time": {"startTimeUnixNano": "-1"},
    "time beyond 2^64": {"endTimeUnixNano": str(2**64)},
    "negative dropped count": {"droppedAttributesCount": -1},
    "dropped count beyond 2^32": {"droppedEventsCount": 2**32},
    "negative flags": {"flags": -1},
    "kind beyond int32": {"kind": 2**31},
    "status code beyond int32": {"status": {"code": -(2**31) - 1}},
    "event time negative": {"events": [{"timeUnixNano": "-5", "name": "e"}]},
    "link flags too big": {"links": [{"traceId": "1" * 32, "spanId": "1" * 16, "flags": 2**32}]},
    "lone surrogate in name": {"name": "\ud800"},
    "lone surrogate in a value": {"attributes": [{"key": "k", "value": {"stringValue": "a\udfffb"}}]},
    "lone surrogate in a key": {"attributes": [{"key": "\ud83d", "value": {"stringValue": "x"}}]},
    "bytes value not base64": {"attributes": [{"key": "b", "value": {"bytesValue": "not base64!"}}]},
    "bytes value not a string": {"attributes": [{"key": "b", "value": {"bytesValue": 12}}]},
    "bytes value with non-ASCII": {"attributes": [{"key": "b", "value": {"bytesValue": "é"}}]},
    "attribute entry not an object": {"attributes": ["k"]},
    "event entry not an object": {"events": [3]},
    "link entry not an object": {"links": [None, "x"]},
    "array value not a list": {"attributes": [{"key": "a", "value": {"arrayValue": {"values": 5}}}]},
    "array entry not an object": {"attributes": [{"key": "a", "value": {"arrayValue": {"values": [1]}}}]},
    "bool value not a bool": {"attributes": [{"key": "a", "value": {"boolValue": "yes"}}]},
    "double value not a number": {"attributes": [{"key": "a", "value": {"doubleValue": "lots"}}]},
    "trace id with whitespace": {"traceId": " " + "0" * 30 + "1 "},
    "span id with an inner space": {"spanId": "00000000 0000001"},
    "hex id with a sign": {"spanId": "+" + "0" * 15},
}


@pytest.mark.parametrize("case", list(OUT_OF_SCHEMA_SPANS), ids=list(OUT_OF_SCHEMA_SPANS))
def test_a_json_span_outside_the_schema_is_rejected_alone_with_a_reason(sqlite_collector, case: str) -> None:
    collector = sqlite_collector
    good = json_span(spanId="00000000000000aa", name="good")
    response = post_json(collector, json_request(good, json_span(**OUT_OF_SCHEMA_SPANS[case])))
    assert response.status_code == 200, response.text
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and partial["errorMessage"], partial
    assert [s.name for s in stored(collector, 1)] == ["good"]
    assert healthy(collector)


def deep_value(depth: int) -> bytes:
    """A span whose one attribute is an array nested `depth` levels deep (built as text: json.dumps would recurse)."""
    value = b'{"arrayValue": {"values": [' * depth + b'{"stringValue": "bottom"}' + b"]}}" * depth
    prefix = json_request(json_span(attributes=[{"key": "d", "value": "HOLE"}]))
    return prefix.replace(b'"HOLE"', value)


REQUEST_LEVEL_PROBLEMS = {
    "resource attribute out of range": json_request(
        json_span(), resource={"attributes": [{"key": "n", "value": {"intValue": str(2**64)}}]}
    ),
    "scope with a lone surrogate": json_request(json_span(), scope={"name": "\udc00"}),
    "resourceSpans entry not an object": b'{"resourceSpans": [1]}',
    "scopeSpans not a list": b'{"resourceSpans": [{"scopeSpans": {}}]}',
    "spans entry not an object": b'{"resourceSpans": [{"scopeSpans": [{"spans": ["s"]}]}]}',
    "deeply nested JSON": b'{"resourceSpans": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "values nested past protobuf's limit": deep_value(60),
    "values nested past the JSON parser's limit": deep_value(5_000),
    "not UTF-8": b'{"resourceSpans": [{"resource": {"attributes": [{"key": "\xff", "value": {}}]}}]}',
    "a JSON array": b"[]",
    "a bare number": b"1e400",
}


@pytest.mark.parametrize("case", list(REQUEST_LEVEL_PROBLEMS), ids=list(REQUEST_LEVEL_PROBLEMS))
def test_a_json_request_outside_the_schema_is_400_with_a_message(sqlite_collector, case: str) -> None:
    collector = sqlite_collector
    response = post_json(collector, REQUEST_LEVEL_PROBLEMS[case])
    assert response.status_code in (200, 400), response.text
    if response.status_code == 400:
        assert response.json()["message"]
    else:  # the nesting limit rejects the span, not the request
        assert response.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert healthy(collector) and export(collector, [make_span(0x70, 1)]).status_code == 200


def test_json_integers_at_the_schema_edges_are_accepted(collector) -> None:
    edges = json_span(
        startTimeUnixNano=str(U64),
        endTimeUnixNano=U64,
        flags=U32,
        kind=I32_MIN,
        droppedAttributesCount=U32,
        status={"code": I32_MAX},
        attributes=[{"key": "lo", "value": {"intValue": str(I64_MIN)}}, {"key": "hi", "value": {"intValue": I64_MAX}}],
    )
    response = post_json(collector, json_request(edges))
    assert response.status_code == 200 and "partialSuccess" not in response.json(), response.text
    (span,) = stored(collector, 1)
    assert (span.start_time_unix_nano, span.flags, span.kind, span.status.code) == (U64, U32, I32_MIN, I32_MAX)
    assert [a.value.int_value for a in span.attributes] == [I64_MIN, I64_MAX]


# --- transport ----------------------------------------------------------------------------------------------------
def test_a_gzip_body_of_several_members_is_read_whole(collector) -> None:
    first = make_request([make_span(0x80, 1)]).SerializeToString()
    second = make_request([make_span(0x80, 2), make_span(0x80, 3)]).SerializeToString()
    # protobuf messages concatenate: the request is both; gzip members concatenate too (RFC 1952 2.2)
    body = gzip.compress(first) + gzip.compress(second)
    response = httpx.post(
        collector.addresses.otlp_http + "/v1/traces", content=body, headers={**PB, "content-encoding": "gzip"}
    )
    assert response.status_code == 200
    assert len(stored(collector, 0x80)) == 3


def test_a_gzip_body_with_trailing_garbage_is_400(collector) -> None:
    body = gzip.compress(make_request([make_span(0x81, 1)]).SerializeToString()) + b"junk"
    response = httpx.post(
        collector.addresses.otlp_http + "/v1/traces", content=body, headers={**PB, "content-encoding": "gzip"}
    )
    assert response.status_code == 400 and stored(collector, 0x81) == []


def test_the_bearer_scheme_is_case_insensitive(start_collector) -> None:
    collector = start_collector(auth_token="s3cret")
    body = make_request([make_span(0x90, 1)]).SerializeToString()
    for scheme in ("bearer", "BEARER", "Bearer"):
        headers = {**PB, "authorization": f"{scheme} s3cret"}
        assert (
            httpx.post(collector.addresses.otlp_http + "/v1/traces", content=body, headers=headers).status_code == 200
        )
        assert httpx.get(collector.addresses.query + "/api/services", headers=headers).status_code == 200
    for wrong in ("Basic s3cret", "Bearer  s3cret", "Bearers3cret", "bearer S3CRET"):
        headers = {**PB, "authorization": wrong}
        assert (
            httpx.post(collector.addresses.otlp_http + "/v1/traces", content=body, headers=headers).status_code == 401
        )


def test_jaeger_v1_array_and_map_tags_are_in_jaegers_compact_json(collector) -> None:
    span = make_span(0xA0, 1, attributes={"list": ["a", "b"], "nums": [1, 2.5]})
    span.attributes.add(
        key="map", value=AnyValue(kvlist_value={"values": [KeyValue(key="k", value=AnyValue(int_value=1))]})
    )
    assert export(collector, [span]).status_code == 200
    trace = httpx.get(collector.addresses.query + f"/api/traces/{trace_id(0xA0).hex()}").json()
    tags = {t["key"]: t for t in trace["data"][0]["spans"][0]["tags"]}
    assert tags["list"] == {"key": "list", "type": "string", "value": '["a","b"]'}
    assert tags["nums"]["value"] == "[1,2.5]"
    assert tags["map"]["value"] == '{"k":1}'


@pytest.mark.parametrize(
    "bad", [" " + "ab" * 16, "ab" * 16 + "\n", "ab cd" + "ab" * 14, "+" + "a" * 31, "0x" + "a" * 30]
)
def test_hex_trace_ids_in_query_paths_are_strict(collector, bad: str) -> None:
    for path in ("/api/traces/", "/api/v3/traces/"):
        response = httpx.get(collector.addresses.query + path + quote(bad, safe=""))
        assert response.status_code == 400, (path, response.text)


def test_overload_is_answered_with_503s_the_clients_receive(start_collector) -> None:
    """Soak, bounded: 16 clients x 8 requests of ~1 MB against a 3 MB in-flight budget (about 5x overload); bodies
    larger than the sockets' buffers, so a reply sent before the body is read would reach the client mid-send.
    Every request gets an answer (200 or 503 + Retry-After), none a connection reset."""
    collector = start_collector(max_in_flight_bytes=3_000_000, max_body_bytes=8 << 20)
    url = collector.addresses.otlp_http + "/v1/traces"
    outcomes: Counter[int] = Counter()
    failures: list[str] = []

    def client(number: int) -> None:
        with httpx.Client(timeout=30) as http:
            for request in range(8):
                pad = {"pad": "x" * 20_000}
                spans = [make_span(0x6000 + number, request * 100 + s, attributes=pad) for s in range(1, 51)]
                body = make_request(spans).SerializeToString()
                try:
                    response = http.post(url, content=body, headers=PB)
                except httpx.TransportError as exc:
                    failures.append(repr(exc))
                    continue
                outcomes[response.status_code] += 1
                if response.status_code == 503:
                    assert response.headers["retry-after"] == "1"

    threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 120
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))
    assert not any(thread.is_alive() for thread in threads), "the soak did not finish in 120 s"
    assert failures == [], f"{len(failures)} of {16 * 8} requests got no answer: {failures[:3]}"
    assert set(outcomes) == {200, 503} and sum(outcomes.values()) == 16 * 8, outcomes
    stored_count = collector.run(collector.store.span_count())
    assert stored_count == outcomes[200] * 50  # every acknowledged span is stored, nothing else
    assert healthy(collector)


def test_a_refused_client_still_sending_its_body_reads_the_503(start_collector) -> None:
    """A client that sends its whole body before reading (most do) must get the 503, not a reset mid-send: the
    collector reads and drops the body of a request it refuses before answering, so the answer never depends on
    what the HTTP server does with an unread body."""
    collector = start_collector(max_in_flight_bytes=10_000, max_body_bytes=8 << 20)
    host, port = collector.addresses.otlp_http.removeprefix("http://").rsplit(":", 1)
    held = socket.create_connection((host, int(port)))  # holds the budget: headers and part of a body, then stalls
    held.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n")
    held.sendall(b"Content-Length: 9000\r\n\r\n" + b"\0" * 10)
    try:
        deadline = time.monotonic() + 30
        while "agl_collector_in_flight_bytes 9000.0" not in httpx.get(collector.addresses.query + "/metrics").text:
            assert time.monotonic() < deadline, "the held request was never admitted"
            time.sleep(0.01)
        size = 1 << 20
        refused = socket.create_connection((host, int(port)), timeout=30)
        refused.sendall(
            f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {size}\r\n\r\n".encode()
        )
        chunk = b"\0" * 65536
        for _ in range(size // len(chunk)):  # raises ConnectionResetError / BrokenPipeError if the server gave up
            refused.sendall(chunk)
            time.sleep(0.005)
        answer = b""
        while b"\r\n\r\n" not in answer:
            received = refused.recv(65536)
            assert received, "connection closed without an answer"
            answer += received
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"retry-after: 1" in answer.lower()
        refused.close()
    finally:
        held.close()
