"""SQLite backend: the embedded default. WAL mode, one writer thread with group commit, readers in parallel.

Every write request waits for the commit that includes it; requests queued while a commit runs share the next
one, so throughput grows with concurrency without a fixed delay. `synchronous=NORMAL` (default) survives a killed
process; `?synchronous=full` in the URL also survives power loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from urllib.parse import parse_qs

from lightning_otel.collector.otlp_decoding import SpanRecord
from lightning_otel.collector.store import (
    RolloutSummary,
    SpanStore,
    StoredSpan,
    TraceQuery,
    TransientStoreError,
    WriteResult,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS scopes (
    id INTEGER PRIMARY KEY,
    digest BLOB NOT NULL UNIQUE,
    resource BLOB NOT NULL,
    scope BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS spans (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    trace_id BLOB NOT NULL,
    span_id BLOB NOT NULL,
    parent_span_id BLOB NOT NULL,
    name TEXT NOT NULL,
    kind INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    status_code INTEGER NOT NULL,
    service TEXT NOT NULL,
    rollout_id TEXT,
    attempt_id TEXT,
    agent_name TEXT,
    operation TEXT,
    scope_id INTEGER NOT NULL REFERENCES scopes(id),
    span BLOB NOT NULL,
    UNIQUE (trace_id, span_id)
);
CREATE INDEX IF NOT EXISTS spans_by_rollout ON spans (rollout_id, attempt_id, seq) WHERE rollout_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS spans_by_service_start ON spans (service, start_ns);
CREATE INDEX IF NOT EXISTS spans_by_start ON spans (start_ns);
CREATE INDEX IF NOT EXISTS spans_by_end ON spans (end_ns);
CREATE TABLE IF NOT EXISTS cursors (name TEXT PRIMARY KEY, seq INTEGER NOT NULL);
"""

_SPAN_COLUMNS = "s.seq, s.trace_id, s.span_id, s.parent_span_id, s.service, s.span, c.resource, c.scope"
_FROM = "FROM spans s JOIN scopes c ON c.id = s.scope_id"
_STOP = object()


def _stored(row: tuple) -> StoredSpan:
    return StoredSpan(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7])


class SQLiteStore(SpanStore):
    def __init__(self, url: str, *, max_batch_spans: int = 20_000) -> None:
        # Everything after `sqlite://` is the path: sqlite:///var/lib/x.sqlite3 is absolute, sqlite://x.sqlite3 not.
        location, _, query = url.removeprefix("sqlite://").partition("?")
        if not location:
            raise ValueError(f"{url!r} names no file: use sqlite:///path/to/collector.sqlite3")
        self.url = url
        self.path = Path(location).expanduser()
        options = {key: values[-1] for key, values in parse_qs(query).items()}
        self.synchronous = options.get("synchronous", "normal").upper()
        if self.synchronous not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValueError(f"synchronous={self.synchronous!r}: use normal or full")
        self.max_batch_spans = max_batch_spans
        self._writes: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._readers = threading.local()
        self._reader_connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    # --- connections -----------------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={self.synchronous}")
        connection.execute("PRAGMA foreign_keys=OFF")
        connection.execute("PRAGMA cache_size=-65536")
        return connection

    def _reader(self) -> sqlite3.Connection:
        connection = getattr(self._readers, "connection", None)
        if connection is None:
            connection = self._connect()
            connection.execute("PRAGMA query_only=ON")
            self._readers.connection = connection
            with self._lock:
                self._reader_connections.append(connection)
        return connection

    async def _read(self, sql: str, parameters: Sequence[object] = ()) -> list[tuple]:
        def run() -> list[tuple]:
            return self._reader().execute(sql, parameters).fetchall()

        return await asyncio.to_thread(run)

    # --- lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = self._connect()
        connection.executescript(SCHEMA)
        self._writer = threading.Thread(
            target=self._write_loop, args=(connection,), name="agl-sqlite-writer", daemon=True
        )
        self._writer.start()

    async def close(self) -> None:
        if self._writer is not None:
            self._writes.put(_STOP)
            await asyncio.to_thread(self._writer.join, 30)
            self._writer = None
        with self._lock:
            for connection in self._reader_connections:
                connection.close()
            self._reader_connections.clear()

    # --- writes: one thread, group commit --------------------------------------------------------------------
    async def write(self, records: Sequence[SpanRecord]) -> WriteResult:
        if not records:
            return WriteResult(0, 0)
        if self._writer is None:
            raise TransientStoreError("the store is not running")
        future: Future[WriteResult] = Future()
        self._writes.put((records, future))
        return await asyncio.wrap_future(future)

    def _write_loop(self, connection: sqlite3.Connection) -> None:
        scope_ids: dict[bytes, int] = {}
        while True:
            first = self._writes.get()
            if first is _STOP:
                connection.close()
                return
            batch = [first]
            spans = len(first[0])  # type: ignore[index]
            while spans < self.max_batch_spans:  # everything queued meanwhile joins this commit
                try:
                    item = self._writes.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    self._writes.put(_STOP)
                    break
                batch.append(item)
                spans += len(item[0])  # type: ignore[index]
            self._commit(connection, batch, scope_ids)

    def _commit(self, connection: sqlite3.Connection, batch: list, scope_ids: dict[bytes, int]) -> None:
        try:
            connection.execute("BEGIN IMMEDIATE")
            results = []
            for records, _ in batch:
                rows = []
                for record in records:
                    digest = record.scope_digest
                    scope_id = scope_ids.get(digest)
                    if scope_id is None:
                        connection.execute(
                            "INSERT OR IGNORE INTO scopes (digest, resource, scope) VALUES (?, ?, ?)",
                            (digest, record.resource_bytes, record.scope_bytes),
                        )
                        scope_id = connection.execute("SELECT id FROM scopes WHERE digest = ?", (digest,)).fetchone()[0]
                        scope_ids[digest] = scope_id
                    rows.append(
                        (
                            record.trace_id,
                            record.span_id,
                            record.parent_span_id,
                            record.name,
                            record.kind,
                            record.start_ns,
                            record.end_ns,
                            record.status_code,
                            record.service_name,
                            record.rollout_id,
                            record.attempt_id,
                            record.agent_name,
                            record.operation,
                            scope_id,
                            record.span_bytes,
                        )
                    )
                before = connection.total_changes
                connection.executemany(
                    "INSERT OR IGNORE INTO spans (trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, "
                    "status_code, service, rollout_id, attempt_id, agent_name, operation, scope_id, span) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                inserted = connection.total_changes - before
                results.append(WriteResult(inserted, len(rows) - inserted))
            connection.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            scope_ids.clear()  # ids inserted in the rolled-back transaction are gone
            error = TransientStoreError(f"SQLite write failed: {exc}")
            for _, future in batch:
                future.set_exception(error)
            return
        for (_, future), result in zip(batch, results, strict=True):
            future.set_result(result)

    # --- reads -----------------------------------------------------------------------------------------------
    async def rollout_spans(self, rollout_id: str, attempt_id: str | None = None) -> list[StoredSpan]:
        if attempt_id == "latest":
            latest = await self._read(
                "SELECT attempt_id FROM spans WHERE rollout_id = ? ORDER BY seq DESC LIMIT 1", (rollout_id,)
            )
            if not latest:
                return []
            attempt_id = latest[0][0]
        if attempt_id is None:
            rows = await self._read(
                f"SELECT {_SPAN_COLUMNS} {_FROM} WHERE s.rollout_id = ? ORDER BY s.seq", (rollout_id,)
            )
        else:
            rows = await self._read(
                f"SELECT {_SPAN_COLUMNS} {_FROM} WHERE s.rollout_id = ? AND s.attempt_id = ? ORDER BY s.seq",
                (rollout_id, attempt_id),
            )
        return [_stored(row) for row in rows]

    async def trace_spans(self, trace_id: bytes) -> list[StoredSpan]:
        rows = await self._read(
            f"SELECT {_SPAN_COLUMNS} {_FROM} WHERE s.trace_id = ? ORDER BY s.start_ns, s.seq", (trace_id,)
        )
        return [_stored(row) for row in rows]

    @staticmethod
    def _conditions(query: TraceQuery) -> tuple[str, list[object]]:
        clauses, parameters = ["1 = 1"], []
        if query.service:
            clauses.append("s.service = ?")
            parameters.append(query.service)
        if query.operation:
            clauses.append("s.name = ?")
            parameters.append(query.operation)
        if query.start_ns is not None:
            clauses.append("s.start_ns >= ?")
            parameters.append(query.start_ns)
        if query.end_ns is not None:
            clauses.append("s.start_ns <= ?")
            parameters.append(query.end_ns)
        if query.min_duration_ns is not None:
            clauses.append("s.end_ns - s.start_ns >= ?")
            parameters.append(query.min_duration_ns)
        if query.max_duration_ns is not None:
            clauses.append("s.end_ns - s.start_ns <= ?")
            parameters.append(query.max_duration_ns)
        return " AND ".join(clauses), parameters

    async def find_trace_ids(self, query: TraceQuery) -> list[bytes]:
        where, parameters = self._conditions(query)
        rows = await self._read(
            f"SELECT s.trace_id FROM spans s WHERE {where} GROUP BY s.trace_id ORDER BY MAX(s.start_ns) DESC LIMIT ?",
            [*parameters, query.limit],
        )
        return [row[0] for row in rows]

    async def candidate_spans(self, query: TraceQuery, limit: int) -> list[StoredSpan]:
        where, parameters = self._conditions(query)
        rows = await self._read(
            f"SELECT {_SPAN_COLUMNS} {_FROM} WHERE {where} ORDER BY s.start_ns DESC LIMIT ?", [*parameters, limit]
        )
        return [_stored(row) for row in rows]

    async def services(self) -> list[str]:
        return [row[0] for row in await self._read("SELECT DISTINCT service FROM spans ORDER BY service")]

    async def operations(self, service: str | None = None) -> list[tuple[str, int]]:
        if service is None:
            rows = await self._read("SELECT DISTINCT name, kind FROM spans ORDER BY name")
        else:
            rows = await self._read("SELECT DISTINCT name, kind FROM spans WHERE service = ? ORDER BY name", (service,))
        return [(row[0], row[1]) for row in rows]

    async def rollouts(self, limit: int = 100, since_ns: int | None = None) -> list[RolloutSummary]:
        rows = await self._read(
            "SELECT rollout_id, COUNT(*), MIN(start_ns), MAX(end_ns), "
            "GROUP_CONCAT(DISTINCT agent_name), GROUP_CONCAT(DISTINCT attempt_id), MAX(seq) AS last "
            "FROM spans WHERE rollout_id IS NOT NULL AND end_ns >= ? GROUP BY rollout_id ORDER BY last DESC LIMIT ?",
            (since_ns or 0, limit),
        )
        return [
            RolloutSummary(
                row[0],
                row[1],
                row[2],
                row[3],
                sorted(filter(None, (row[4] or "").split(","))),
                sorted(filter(None, (row[5] or "").split(","))),
            )
            for row in rows
        ]

    async def delete_before(self, end_ns: int) -> int:
        def run() -> int:
            # In chunks: each transaction holds SQLite's write lock briefly, so ingestion keeps flowing.
            connection = self._connect()
            deleted = 0
            try:
                while True:
                    count = connection.execute(
                        "DELETE FROM spans WHERE seq IN (SELECT seq FROM spans WHERE end_ns < ? LIMIT 5000)",
                        (end_ns,),
                    ).rowcount
                    deleted += count
                    if count < 5000:
                        return deleted
            finally:
                connection.close()

        return await asyncio.to_thread(run)

    async def spans_after(self, seq: int, limit: int) -> list[StoredSpan]:
        rows = await self._read(f"SELECT {_SPAN_COLUMNS} {_FROM} WHERE s.seq > ? ORDER BY s.seq LIMIT ?", (seq, limit))
        return [_stored(row) for row in rows]

    async def get_cursor(self, name: str) -> int:
        rows = await self._read("SELECT seq FROM cursors WHERE name = ?", (name,))
        return int(rows[0][0]) if rows else 0

    async def set_cursor(self, name: str, seq: int) -> None:
        def run() -> None:
            connection = self._connect()
            try:
                connection.execute(
                    "INSERT INTO cursors (name, seq) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET seq = excluded.seq",
                    (name, seq),
                )
            finally:
                connection.close()

        await asyncio.to_thread(run)

    async def span_count(self) -> int:
        return int((await self._read("SELECT COUNT(*) FROM spans"))[0][0])


def default_sqlite_url() -> str:
    """A file under the user's data directory (XDG_DATA_HOME honoured)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return f"sqlite:///{Path(base) / 'lightning-otel' / 'collector.sqlite3'}"
