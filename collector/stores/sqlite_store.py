"""SQLite backend: the embedded default. WAL mode, one writer thread with group commit, readers in parallel.

Every write request waits for the commit that includes it; requests queued while a commit runs share the next
one, so throughput grows with concurrency without a fixed delay. `synchronous=NORMAL` (default) survives a killed
process; `?synchronous=full` in the URL also survives power loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from urllib.parse import parse_qs

from lightning_otel.collector.queue_schema import ADDED_COLUMNS, LOG_SCHEMA, RUN_INDEXES, STATE_SCHEMA
from lightning_otel.collector.stores.span_record import SpanRecord
from lightning_otel.collector.stores.sql_reads import INDEXES, SQLReads
from lightning_otel.collector.stores.store import (
    PROBE,
    RolloutSummary,
    StateTransaction,
    T,
    TransientStoreError,
    WriteResult,
    fail_writes,
    refusal,
)

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
    + LOG_SCHEMA
)

_STOP = object()
# A row the database refuses (a constraint or trigger, a value it cannot bind): that span is rejected, not the batch.
_ROW_ERRORS = (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError, OverflowError, ValueError, TypeError)
_INSERT_SPAN = (
    "INSERT OR IGNORE INTO agl_spans (trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, "
    "status_code, service, rollout_id, attempt_id, agent_name, operation, scope_id, span) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
logger = logging.getLogger(__name__)


def new_directory_at_the_root(url: str) -> str | None:
    """Why `url` must not be opened, or None: `sqlite:///sub/x.db` names /sub/x.db, and a file or a folder that does
    not exist at the filesystem's root was almost surely meant relative to here (./sub/x.db); the store would
    create it at the root. `sqlite:////sub/x.db` (four slashes, SQLAlchemy's spelling) says the root on purpose."""
    if not url.startswith("sqlite:///") or url.startswith("sqlite:////"):
        return None
    path = Path("/" + url.removeprefix("sqlite:///").partition("?")[0])
    top = Path("/", *path.parts[1:2])
    if path.exists() or top.exists():
        return None
    relative = path.relative_to("/")
    return (f"{url} names {path}, which would create {top} at the filesystem's root (sqlite:/// is followed by an "
            f"absolute path): for ./{relative} give its path ({relative}), for the root sqlite:///{path}")  # fmt: skip


class SQLiteStore(SQLReads):
    writer_name = "the SQLite writer"

    def __init__(self, url: str, *, max_batch_spans: int = 20_000) -> None:
        # Everything after `sqlite://` is the path: sqlite:///var/lib/x.sqlite3 is absolute, sqlite://x.sqlite3 not.
        location, _, query = url.removeprefix("sqlite://").partition("?")
        if not location:
            raise ValueError(f"{url!r} names no file: use sqlite:///path/to/collector.sqlite3")
        self.url = url
        if location.startswith("//"):  # sqlite:////abs/path (SQLAlchemy's spelling) means the same file
            location = "/" + location.lstrip("/")
        if refused := new_directory_at_the_root(url):
            raise ValueError(refused)
        self.path = Path(location).expanduser()
        options = {key: values[-1] for key, values in parse_qs(query).items()}
        self.synchronous = options.get("synchronous", "normal").upper()
        if self.synchronous not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValueError(f"synchronous={self.synchronous!r}: use normal or full")
        try:  # each connection's page cache (a bound, not a reservation): 64 MiB serves; one pass needs little
            self.cache_mib = int(options.get("cache_mib", "64"))
        except ValueError:
            raise ValueError(f"cache_mib={options['cache_mib']!r}: a whole number of MiB") from None
        self.max_batch_spans = max_batch_spans
        self._writes: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_death = ""
        self._write_connection: sqlite3.Connection | None = None
        self._scope_ids: dict[bytes, int] = {}
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
        connection.execute(f"PRAGMA cache_size=-{max(1, self.cache_mib) * 1024}")
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
            for table, column, kind in ADDED_COLUMNS:  # a store made before these columns existed
                if column not in {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}:
                    connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            connection.executescript(RUN_INDEXES)
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
        self._state_thread.shutdown(wait=False)
        with self._lock:
            for connection in self._reader_connections:
                connection.close()
            self._reader_connections.clear()

    # --- writes: one thread, group commit, supervised ----------------------------------------------------------
    async def _through_writer(self, records: Sequence[SpanRecord]) -> WriteResult:
        if self._writer is None or not self._writer.is_alive():
            raise TransientStoreError(f"the SQLite writer is not running{self._writer_death}")
        future: Future[WriteResult] = Future()
        self._writes.put((records, future))
        return await asyncio.wrap_future(future)

    def _write_loop(self, connection: sqlite3.Connection) -> None:
        self._write_connection = connection
        try:
            while self._serve_one_batch():
                pass
        except BaseException as exc:  # a bug of ours: say so everywhere rather than hang every later write
            logger.exception("lightning-otel collector: the SQLite writer stopped")
            self._writer_death = f": it stopped on {type(exc).__name__}: {exc}"
            self._fail_queued(TransientStoreError(f"the SQLite writer stopped ({type(exc).__name__}: {exc})"))
        finally:
            if self._write_connection is not None:
                self._write_connection.close()

    def _serve_one_batch(self) -> bool:
        first = self._writes.get()
        if first is _STOP:
            return False
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
        writes = [(records, future) for records, future in batch if records is not PROBE]  # type: ignore[misc]
        try:
            connection = self._writer_connection()
            if writes:
                self._commit(connection, writes)
            else:
                connection.execute("BEGIN IMMEDIATE")  # a probe: can the writer take the write lock?
                connection.execute("ROLLBACK")
        except sqlite3.Error as exc:  # locked, read-only, disk full, unopenable: 503, and reconnect next batch
            self._drop_writer_connection()
            fail_writes(batch, TransientStoreError(f"SQLite write failed: {exc}"))
            return True
        except Exception as exc:  # a bug of ours: this batch is answered 503 (clients retry), the writer goes on
            logger.exception("lightning-otel collector: unexpected error in a SQLite commit")
            self._drop_writer_connection()
            fail_writes(batch, TransientStoreError(f"SQLite write failed unexpectedly: {type(exc).__name__}: {exc}"))
            return True
        for records, future in batch:
            if records is PROBE:  # type: ignore[comparison-overlap]
                future.set_result(WriteResult(0, 0))
        return True

    def _writer_connection(self) -> sqlite3.Connection:
        if self._write_connection is None:
            self._write_connection = self._connect()
            self._scope_ids.clear()
        return self._write_connection

    def _drop_writer_connection(self) -> None:
        if self._write_connection is not None:
            with contextlib.suppress(sqlite3.Error):
                self._write_connection.close()
            self._write_connection = None
        self._scope_ids.clear()

    def _fail_queued(self, error: Exception) -> None:
        while True:
            try:
                item = self._writes.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP:
                fail_writes([item], error)

    def _commit(self, connection: sqlite3.Connection, batch: list) -> None:
        """One transaction for the whole batch. If a row is refused, the transaction is redone with each span in a
        savepoint, so that only the refused spans are left out (and reported); errors of the database itself
        (locked, read-only, disk full) propagate: the batch is answered 503."""
        try:
            results = self._insert_batch(connection, batch, isolate=False)
        except _ROW_ERRORS:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            self._scope_ids.clear()  # ids inserted in the rolled-back transaction are gone
            results = self._insert_batch(connection, batch, isolate=True)
        except sqlite3.Error:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            self._scope_ids.clear()
            raise
        for (_, future), result in zip(batch, results, strict=True):
            future.set_result(result)

    def _insert_batch(self, connection: sqlite3.Connection, batch: list, *, isolate: bool) -> list[WriteResult]:
        connection.execute("BEGIN IMMEDIATE")
        try:
            results = [self._insert(connection, records, isolate) for records, _ in batch]
            connection.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            self._scope_ids.clear()
            raise
        return results

    def _insert(self, connection: sqlite3.Connection, records: Sequence[SpanRecord], isolate: bool) -> WriteResult:
        if not isolate:
            rows = [self._row(connection, record) for record in records]
            before = connection.total_changes
            connection.executemany(_INSERT_SPAN, rows)
            inserted = connection.total_changes - before
            return WriteResult(inserted, len(rows) - inserted)
        inserted, rejected = 0, []
        for record in records:
            connection.execute("SAVEPOINT span")
            try:
                row = self._row(connection, record)  # may insert the scope's row: not a span
                before = connection.total_changes
                connection.execute(_INSERT_SPAN, row)
                inserted += connection.total_changes - before
            except _ROW_ERRORS as exc:
                connection.execute("ROLLBACK TO span")
                self._scope_ids.clear()  # a scope row inserted for this span is rolled back too
                rejected.append(refusal(record, exc))
            connection.execute("RELEASE span")
        return WriteResult(inserted, len(records) - inserted - len(rejected), rejected)

    def _row(self, connection: sqlite3.Connection, record: SpanRecord) -> tuple:
        digest = record.scope_digest
        scope_id = self._scope_ids.get(digest)
        if scope_id is None:
            connection.execute(
                "INSERT OR IGNORE INTO agl_scopes (digest, resource, scope) VALUES (?, ?, ?)",
                (digest, record.resource_bytes, record.scope_bytes),
            )
            scope_id = connection.execute("SELECT id FROM agl_scopes WHERE digest = ?", (digest,)).fetchone()[0]
            self._scope_ids[digest] = scope_id
        return (
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

    # --- rollout state ---------------------------------------------------------------------------------------
    async def state_transaction(self, work: Callable[[StateTransaction], T]) -> T:
        try:
            submitted = self._state_thread.submit(self._state_work, work)
        except RuntimeError:  # a request that arrives while the collector shuts down: 503, the client retries
            raise TransientStoreError("the store is closed") from None
        return await asyncio.wrap_future(submitted)

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

    def notify(self, topic: str) -> None:  # one collector per SQLite file: nobody else to tell
        pass

    def serialize(self, name: str) -> None:  # BEGIN IMMEDIATE: one writer at a time already
        pass


def default_sqlite_url() -> str:
    """A file under the user's data directory (XDG_DATA_HOME honoured)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return f"sqlite:///{Path(base) / 'lightning-otel' / 'collector.sqlite3'}"
