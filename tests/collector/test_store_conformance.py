"""One conformance suite for every store backend (SQLite and a throwaway PostgreSQL cluster)."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from lightning_otel.collector.stores.store import TraceQuery
from lightning_otel.collector.stores.stores import open_store
from lightning_otel.testing.otlp_factory import BASE_NS, make_span, records, trace_id


async def test_write_is_idempotent_and_counts_duplicates(span_store) -> None:
    batch = records([make_span(1, s, rollout="r1", attempt="a1") for s in range(1, 6)])
    first = await span_store.write(batch)
    assert (first.inserted, first.duplicates) == (5, 0)
    again = await span_store.write(batch[2:] + records([make_span(1, 6, rollout="r1", attempt="a1")]))
    assert (again.inserted, again.duplicates) == (1, 3)
    assert await span_store.span_count() == 6


async def test_concurrent_writers_share_commits_without_loss(span_store) -> None:
    async def writer(w: int) -> int:
        total = 0
        for b in range(10):
            result = await span_store.write(records([make_span(100 + w, b * 20 + s + 1) for s in range(20)]))
            total += result.inserted
        return total

    inserted = await asyncio.gather(*(writer(w) for w in range(8)))
    assert sum(inserted) == 8 * 10 * 20
    assert await span_store.span_count() == 1600


async def test_rollout_reads_in_ingest_order_by_attempt_and_latest(span_store) -> None:
    await span_store.write(
        records(
            [
                make_span(1, 3, rollout="r1", attempt="a1", start_us=30),
                make_span(1, 1, rollout="r1", attempt="a1", start_us=10),
            ]
        )
    )
    await span_store.write(
        records(
            [make_span(2, 2, rollout="r1", attempt="a2"), make_span(3, 9, rollout="r2", attempt="a1"), make_span(4, 8)]
        )
    )  # no rollout: stored, not in any rollout
    every = await span_store.rollout_spans("r1")
    assert [Span.FromString(s.span_bytes).span_id[-1] for s in every] == [3, 1, 2]  # ingest order, not time
    assert [s.seq for s in every] == sorted(s.seq for s in every)
    assert len(await span_store.rollout_spans("r1", "a1")) == 2
    latest = await span_store.rollout_spans("r1", "latest")
    assert [Span.FromString(s.span_bytes).attributes[1].value.string_value for s in latest] == ["a2"]
    assert await span_store.rollout_spans("nope") == []
    assert await span_store.rollout_spans("nope", "latest") == []
    assert await span_store.span_count() == 5


async def test_a_batch_read_equals_one_read_per_attempt(span_store) -> None:
    """`attempts_spans` (a training batch, an export page; read in chunks of rollouts) gives each attempt exactly
    what `rollout_spans` gives it: ingest order, the attempt's spans only, "latest" and all-attempts reads too, and
    an empty list for what is not stored; more rollouts than one chunk."""
    from lightning_otel.collector.stores.sql_reads import READ_CHUNK

    rollouts = READ_CHUNK + 7
    spans = []
    for n in range(rollouts):  # two attempts each: a1 with 2 spans, a2 with 1 (written last, so "latest")
        spans += [make_span(10 + n, 1, rollout=f"r{n}", attempt="a1", start_us=30),
                  make_span(10 + n, 2, rollout=f"r{n}", attempt="a1", start_us=10)]  # fmt: skip
    await span_store.write(records(spans))
    await span_store.write(records([make_span(10 + n, 3, rollout=f"r{n}", attempt="a2") for n in range(rollouts)]))
    wanted = [(f"r{n}", "a1") for n in reversed(range(rollouts))]
    wanted += [("r0", "a2"), ("r1", "latest"), ("r2", None), ("nope", "a1"), ("r3", "a9"), ("nope", "latest")]
    batch = await span_store.attempts_spans(wanted)
    one_by_one = [await span_store.rollout_spans(*key) for key in wanted]
    assert [[s.seq for s in spans] for spans in batch] == [[s.seq for s in spans] for spans in one_by_one]
    assert [len(spans) for spans in batch[:3]] == [2, 2, 2] and [len(spans) for spans in batch[-6:]] == [
        1,
        1,
        3,
        0,
        0,
        0,
    ]


async def test_stored_bytes_round_trip_exactly(span_store) -> None:
    span = make_span(
        7,
        7,
        parent=3,
        name="chat m",
        rollout="r",
        kind=3,
        status=2,
        attributes={"agl.llm.prompt_token_ids": [1, 2, 3], "x": 1.5, "big": 2**62, "ok": True},
    )
    (record,) = records([span], service="agent-svc")
    await span_store.write([record])
    (stored,) = await span_store.trace_spans(trace_id(7))
    assert Span.FromString(stored.span_bytes) == span
    assert stored.service_name == "agent-svc"
    assert stored.resource_bytes == record.resource_bytes and stored.scope_bytes == record.scope_bytes


async def test_trace_search_services_operations(span_store) -> None:
    await span_store.write(
        records(
            [
                make_span(1, 1, name="invoke_agent writer", start_us=0, duration_us=5000),
                make_span(1, 2, parent=1, name="chat m", kind=3, start_us=100),
            ],
            service="a",
        )
    )
    await span_store.write(
        records([make_span(2, 3, name="chat m", kind=3, start_us=10_000, duration_us=50)], service="b")
    )
    assert await span_store.services() == ["a", "b"]
    assert await span_store.operations("a") == [("chat m", 3), ("invoke_agent writer", 1)]
    assert sorted(await span_store.operations()) == [("chat m", 3), ("invoke_agent writer", 1)]
    assert await span_store.find_trace_ids(TraceQuery()) == [trace_id(2), trace_id(1)]  # newest first
    assert await span_store.find_trace_ids(TraceQuery(service="a")) == [trace_id(1)]
    assert await span_store.find_trace_ids(TraceQuery(operation="chat m", limit=1)) == [trace_id(2)]
    assert await span_store.find_trace_ids(TraceQuery(min_duration_ns=1_000_000)) == [trace_id(1)]
    assert await span_store.find_trace_ids(TraceQuery(max_duration_ns=100_000)) == [trace_id(2)]
    window = TraceQuery(start_ns=BASE_NS + 5_000_000, end_ns=BASE_NS + 20_000_000)
    assert await span_store.find_trace_ids(window) == [trace_id(2)]
    assert len(await span_store.candidate_spans(TraceQuery(service="a"), limit=10)) == 2


async def test_rollout_summaries(span_store) -> None:
    await span_store.write(
        records(
            [
                make_span(1, 1, rollout="r1", attempt="a1", agent="writer"),
                make_span(1, 2, rollout="r1", attempt="a2", agent="checker", start_us=50),
                make_span(2, 3, rollout="r2", attempt="a1"),
            ]
        )
    )
    summaries = {s.rollout_id: s for s in await span_store.rollouts()}
    assert set(summaries) == {"r1", "r2"}
    r1 = summaries["r1"]
    assert (r1.span_count, r1.agents, r1.attempts) == (2, ["checker", "writer"], ["a1", "a2"])
    assert r1.start_ns == BASE_NS and r1.end_ns == BASE_NS + 1_050_000
    assert [s.rollout_id for s in await span_store.rollouts(limit=1)] == ["r2"]  # most recent first


async def test_outbox_tail_cursors_and_retention(span_store) -> None:
    await span_store.write(records([make_span(1, s, start_us=s * 1000) for s in range(1, 11)]))
    first = await span_store.spans_after(0, 4)
    assert len(first) == 4
    rest = await span_store.spans_after(first[-1].seq, 100)
    assert len(rest) == 6 and rest[0].seq > first[-1].seq
    assert await span_store.get_cursor("forward:x") == 0
    await span_store.set_cursor("forward:x", first[-1].seq)
    await span_store.set_cursor("forward:x", rest[-1].seq)
    assert await span_store.get_cursor("forward:x") == rest[-1].seq
    deleted = await span_store.delete_before(BASE_NS + 5_500_000)  # spans 1..4 end before 5.5 ms
    assert deleted == 4
    assert await span_store.span_count() == 6


async def test_sqlite_url_options(tmp_path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/full.sqlite3?synchronous=full")
    await store.start()
    try:
        await store.write(records([make_span(1, 1)]))
        connection = store._connect()  # the pragma is per connection: check one the store opens
        assert connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        connection.close()
    finally:
        await store.close()
    assert sqlite3.connect(tmp_path / "full.sqlite3").execute("SELECT COUNT(*) FROM agl_spans").fetchone()[0] == 1
    with pytest.raises(ValueError, match="synchronous"):
        open_store(f"sqlite:///{tmp_path}/x.sqlite3?synchronous=sometimes")
    small = open_store(f"sqlite:///{tmp_path}/full.sqlite3?cache_mib=2")  # the export's: a bounded page cache
    connection = small._connect()
    assert connection.execute("PRAGMA cache_size").fetchone()[0] == -2048
    connection.close()
    with pytest.raises(ValueError, match="cache_mib"):
        open_store(f"sqlite:///{tmp_path}/x.sqlite3?cache_mib=lots")
    with pytest.raises(ValueError, match="names no file"):
        open_store("sqlite://")
    with pytest.raises(ValueError, match="unsupported store URL"):
        open_store("mysql://db")
