"""What both SQL backends share: the reads (same tables `agl_spans`, `agl_scopes`, `agl_cursors`, same SQL), and
the front door of their single writer (`write`, and `problem`, which probes the writer through its own queue).

Queries are written with `?` placeholders; a backend whose driver wants another style translates them in its
`_read` / `_execute`. What differs between SQLite and PostgreSQL (writes, aggregation, deletes) stays in each backend.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Sequence

from lightning_otel.collector.stores.span_record import SpanRecord
from lightning_otel.collector.stores.store import (
    PROBE,
    PROBE_TIMEOUT_S,
    SpanStore,
    StoredSpan,
    TraceQuery,
    TransientStoreError,
    WriteResult,
)

READ_CHUNK = 200  # rollouts per query of a batch read (a bound on the IN list and on the rows in one fetch)
SPAN_COLUMNS = "s.seq, s.trace_id, s.span_id, s.parent_span_id, s.service, s.span, c.resource, c.scope"
FROM = "FROM agl_spans s JOIN agl_scopes c ON c.id = s.scope_id"
INDEXES = """
CREATE INDEX IF NOT EXISTS agl_spans_by_rollout ON agl_spans (rollout_id, attempt_id, seq)
    WHERE rollout_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS agl_spans_by_service_start ON agl_spans (service, start_ns);
CREATE INDEX IF NOT EXISTS agl_spans_by_start ON agl_spans (start_ns);
CREATE INDEX IF NOT EXISTS agl_spans_by_end ON agl_spans (end_ns);
CREATE TABLE IF NOT EXISTS agl_cursors (name TEXT PRIMARY KEY, seq BIGINT NOT NULL);
"""


def stored(row: Sequence) -> StoredSpan:
    return StoredSpan(
        row[0], bytes(row[1]), bytes(row[2]), bytes(row[3]), row[4], bytes(row[5]), bytes(row[6]), bytes(row[7])
    )


def trace_query_conditions(query: TraceQuery) -> tuple[str, list[object]]:
    """The WHERE clause of a Jaeger-style search (tags are matched by the caller)."""
    clauses, parameters = ["1 = 1"], []
    for clause, value in (
        ("s.service = ?", query.service or None),
        ("s.name = ?", query.operation or None),
        ("s.start_ns >= ?", query.start_ns),
        ("s.start_ns <= ?", query.end_ns),
        ("s.end_ns - s.start_ns >= ?", query.min_duration_ns),
        ("s.end_ns - s.start_ns <= ?", query.max_duration_ns),
    ):
        if value is not None:
            clauses.append(clause)
            parameters.append(value)
    return " AND ".join(clauses), parameters


class SQLReads(SpanStore):
    writer_name: str  # "the SQLite writer", "the PostgreSQL writer"

    @abc.abstractmethod
    async def _read(self, sql: str, parameters: Sequence[object] = ()) -> list[tuple]: ...

    @abc.abstractmethod
    async def _through_writer(self, records: Sequence[SpanRecord]) -> WriteResult:
        """Queue `records` (or `PROBE`) for the writer and wait for its answer."""

    async def write(self, records: Sequence[SpanRecord]) -> WriteResult:
        if not records:
            return WriteResult(0, 0)
        return await self._through_writer(records)

    async def problem(self) -> str | None:
        try:  # a probe goes through the writer's queue: a dead or stuck writer cannot answer it
            await asyncio.wait_for(self._through_writer(PROBE), PROBE_TIMEOUT_S)
        except TimeoutError:
            return f"{self.writer_name} has not answered for {PROBE_TIMEOUT_S:.0f} s"
        except TransientStoreError as exc:
            return str(exc)
        return None

    @abc.abstractmethod
    async def _execute(self, sql: str, parameters: Sequence[object] = ()) -> int: ...

    async def rollout_spans(self, rollout_id: str, attempt_id: str | None = None) -> list[StoredSpan]:
        if attempt_id == "latest":
            latest = await self._read(
                "SELECT attempt_id FROM agl_spans WHERE rollout_id = ? ORDER BY seq DESC LIMIT 1", (rollout_id,)
            )
            if not latest:
                return []
            attempt_id = latest[0][0]
        if attempt_id is None:
            rows = await self._read(
                f"SELECT {SPAN_COLUMNS} {FROM} WHERE s.rollout_id = ? ORDER BY s.seq", (rollout_id,)
            )
        else:
            rows = await self._read(
                f"SELECT {SPAN_COLUMNS} {FROM} WHERE s.rollout_id = ? AND s.attempt_id = ? ORDER BY s.seq",
                (rollout_id, attempt_id),
            )
        return [stored(row) for row in rows]

    async def attempts_spans(self, wanted: Sequence[tuple[str, str | None]]) -> list[list[StoredSpan]]:
        """Named attempts are read by rollout id, `READ_CHUNK` rollouts a query (other attempts' spans of those
        rollouts are left out here); all-attempts and "latest" reads go one rollout at a time."""
        named = {(rollout_id, attempt) for rollout_id, attempt in wanted if attempt not in (None, "latest")}
        by_attempt: dict[tuple[str, str], list[StoredSpan]] = {key: [] for key in named}
        rollout_ids = sorted({rollout_id for rollout_id, _ in named})
        for start in range(0, len(rollout_ids), READ_CHUNK):
            chunk = rollout_ids[start : start + READ_CHUNK]
            rows = await self._read(
                f"SELECT {SPAN_COLUMNS}, s.rollout_id, s.attempt_id {FROM} "
                f"WHERE s.rollout_id IN ({', '.join('?' * len(chunk))}) ORDER BY s.seq",
                chunk,
            )
            for row in rows:
                spans = by_attempt.get((row[-2], row[-1]))
                if spans is not None:
                    spans.append(stored(row))
        others = [key for key in wanted if key[1] in (None, "latest")]
        read_one_by_one = dict(zip(others, await asyncio.gather(*(self.rollout_spans(*key) for key in others)),
                                   strict=True))  # fmt: skip
        return [by_attempt[key] if key in by_attempt else read_one_by_one[key] for key in wanted]  # type: ignore[index]

    async def trace_spans(self, trace_id: bytes) -> list[StoredSpan]:
        rows = await self._read(
            f"SELECT {SPAN_COLUMNS} {FROM} WHERE s.trace_id = ? ORDER BY s.start_ns, s.seq", (trace_id,)
        )
        return [stored(row) for row in rows]

    async def find_trace_ids(self, query: TraceQuery) -> list[bytes]:
        where, parameters = trace_query_conditions(query)
        rows = await self._read(
            f"SELECT s.trace_id FROM agl_spans s WHERE {where} GROUP BY s.trace_id "
            "ORDER BY MAX(s.start_ns) DESC LIMIT ?",
            [*parameters, query.limit],
        )
        return [bytes(row[0]) for row in rows]

    async def candidate_spans(self, query: TraceQuery, limit: int) -> list[StoredSpan]:
        where, parameters = trace_query_conditions(query)
        rows = await self._read(
            f"SELECT {SPAN_COLUMNS} {FROM} WHERE {where} ORDER BY s.start_ns DESC LIMIT ?", [*parameters, limit]
        )
        return [stored(row) for row in rows]

    async def services(self) -> list[str]:
        return [row[0] for row in await self._read("SELECT DISTINCT service FROM agl_spans ORDER BY service")]

    async def operations(self, service: str | None = None) -> list[tuple[str, int]]:
        if service is None:
            rows = await self._read("SELECT DISTINCT name, kind FROM agl_spans ORDER BY name")
        else:
            rows = await self._read(
                "SELECT DISTINCT name, kind FROM agl_spans WHERE service = ? ORDER BY name", (service,)
            )
        return [(row[0], row[1]) for row in rows]

    async def spans_after(self, seq: int, limit: int) -> list[StoredSpan]:
        rows = await self._read(f"SELECT {SPAN_COLUMNS} {FROM} WHERE s.seq > ? ORDER BY s.seq LIMIT ?", (seq, limit))
        return [stored(row) for row in rows]

    async def get_cursor(self, name: str) -> int:
        rows = await self._read("SELECT seq FROM agl_cursors WHERE name = ?", (name,))
        return int(rows[0][0]) if rows else 0

    async def set_cursor(self, name: str, seq: int) -> None:
        await self._execute(
            "INSERT INTO agl_cursors (name, seq) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET seq = excluded.seq",
            (name, seq),
        )

    async def span_count(self) -> int:
        return int((await self._read("SELECT COUNT(*) FROM agl_spans"))[0][0])
