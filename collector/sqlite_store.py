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
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from urllib.parse import parse_qs

from lightning_otel.collector.otlp_decoding import SpanRecord
from lightning_otel.collector.queue_schema import STATE_SCHEMA
from lightning_otel.collector.sql_reads import INDEXES, SQLReads
from lightning_otel.collector.store import RolloutSummary, StateTransaction, T, TransientStoreError, WriteResult

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS agl_scopes (
    id INTEGER PRIMARY KEY,
    digest BLOB NOT NULL UNIQUE,
    resource BLOB NOT NULL,
    scope BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS agl_spans (
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
    scope_id INTEGER NOT NULL REFERENCES agl_scopes(id),
    span BLOB NOT NULL,
    UNIQUE (trace_id, span_id)
);
"""
    + INDEXES
    + STATE_SCHEMA
)

_STOP = object()


class SQLiteStore(SQLReads):
    def __init__(self, url: str, *, max_batch_spans: int = 20_000) -> None:
        # Everything after `sqlite://` is the path: sqlite:///var/lib/x.sqlite3 is absolute, sqlite://x.sqlite3 not.
        location, _, query = url.removeprefix("sqlite://").partition("?")
        if not location:
            raise ValueError(f"{url!r} names no file: use sqlite:///path/to/collector.sqlite3")
        self.url = url
        if location.startswith("//"):  # sqlite:////abs/path (SQLAlchemy's spelling) means the same file
            location = "/" + location.lstrip("/")
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
        # Rollout state: one thread, one connection, so its transactions queue here rather than on SQLite's lock.
        self._state_thread = ThreadPoolExecutor(1, thread_name_prefix="agl-sqlite-state")
        self._state_connection: sqlite3.Connection | None = None

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
        try:
            connection = self._connect()
            connection.executescript(SCHEMA)
        except sqlite3.Error as exc:  # not a database, unreadable, locked by another writer for 30 s
            raise TransientStoreError(f"SQLite at {self.path} unusable: {exc}") from exc
        self._writer = threading.Thread(
            target=self._write_loop, args=(connection,), name="agl-sqlite-writer", daemon=True
        )
        self._writer.start()

    async def close(self) -> None:
        if self._writer is not None:
            self._writes.put(_STOP)
            await asyncio.to_thread(self._writer.join, 30)
            self._writer = None
        await asyncio.wrap_future(self._state_thread.submit(self._close_state_connection))
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
                            "INSERT OR IGNORE INTO agl_scopes (digest, resource, scope) VALUES (?, ?, ?)",
                            (digest, record.resource_bytes, record.scope_bytes),
                        )
                        scope_id = connection.execute(
                            "SELECT id FROM agl_scopes WHERE digest = ?", (digest,)
                        ).fetchone()[0]
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
                    "INSERT OR IGNORE INTO agl_spans (trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, "
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

    # --- rollout state ---------------------------------------------------------------------------------------
    async def state_transaction(self, work: Callable[[StateTransaction], T]) -> T:
        return await asyncio.wrap_future(self._state_thread.submit(self._state_work, work))

    def _state_work(self, work: Callable[[StateTransaction], T]) -> T:
        if self._state_connection is None:
            self._state_connection = self._connect()
        connection = self._state_connection
        try:
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:  # locked for 30 s
            raise TransientStoreError(f"SQLite busy: {exc}") from exc
        try:
            result = work(_SQLiteTransaction(connection))
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        return result

    def _close_state_connection(self) -> None:
        if self._state_connection is not None:
            self._state_connection.close()
            self._state_connection = None

    # --- reads and small writes (the shared queries are in SQLReads) ------------------------------------------
    async def _execute(self, sql: str, parameters: Sequence[object] = ()) -> int:
        def run() -> int:
            connection = self._connect()  # not the group-commit writer: these are rare (cursors, retention)
            try:
                return connection.execute(sql, parameters).rowcount
            finally:
                connection.close()

        return await asyncio.to_thread(run)

    async def rollouts(self, limit: int = 100, since_ns: int | None = None) -> list[RolloutSummary]:
        rows = await self._read(
            "SELECT rollout_id, COUNT(*), MIN(start_ns), MAX(end_ns), "
            "GROUP_CONCAT(DISTINCT agent_name), GROUP_CONCAT(DISTINCT attempt_id), MAX(seq) AS last "
            "FROM agl_spans WHERE rollout_id IS NOT NULL AND end_ns >= ? "
            "GROUP BY rollout_id ORDER BY last DESC LIMIT ?",
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
        # In chunks: each transaction holds SQLite's write lock briefly, so ingestion keeps flowing.
        deleted = 0
        while True:
            count = await self._execute(
                "DELETE FROM agl_spans WHERE seq IN (SELECT seq FROM agl_spans WHERE end_ns < ? LIMIT 5000)", (end_ns,)
            )
            deleted += count
            if count < 5000:
                return deleted


class _SQLiteTransaction:
    for_update = ""  # BEGIN IMMEDIATE already holds the only write lock
    skip_locked = ""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def execute(self, sql: str, parameters: Sequence[object] = ()) -> list[tuple]:
        return self._connection.execute(sql, parameters).fetchall()

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        self._connection.executemany(sql, rows)


def default_sqlite_url() -> str:
    """A file under the user's data directory (XDG_DATA_HOME honoured)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return f"sqlite:///{Path(base) / 'lightning-otel' / 'collector.sqlite3'}"
