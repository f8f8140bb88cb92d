"""PostgreSQL backend: the scale store. One writer connection with group commit, a small pool for reads.

Writes queued while a commit runs share the next transaction; each request's spans go in as one
`INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING`, so its inserted/duplicate counts stay exact. A single
writer also keeps `seq` (the ingest order) equal to commit order, which the forwarding outbox's cursor relies on.
Connection errors are `TransientStoreError` (the receivers answer 503 and clients retry); the writer reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

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
    id BIGSERIAL PRIMARY KEY,
    digest BYTEA NOT NULL UNIQUE,
    resource BYTEA NOT NULL,
    scope BYTEA NOT NULL
);
CREATE TABLE IF NOT EXISTS agl_spans (
    seq BIGSERIAL PRIMARY KEY,
    trace_id BYTEA NOT NULL,
    span_id BYTEA NOT NULL,
    parent_span_id BYTEA NOT NULL,
    name TEXT NOT NULL,
    kind SMALLINT NOT NULL,
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    status_code SMALLINT NOT NULL,
    service TEXT NOT NULL,
    rollout_id TEXT,
    attempt_id TEXT,
    agent_name TEXT,
    operation TEXT,
    scope_id BIGINT NOT NULL,
    span BYTEA NOT NULL,
    UNIQUE (trace_id, span_id)
);
"""
    + INDEXES
    + STATE_SCHEMA
    + LOG_SCHEMA
)

_INSERT = (
    "INSERT INTO agl_spans (trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, status_code, service, "
    "rollout_id, attempt_id, agent_name, operation, scope_id, span) "
    "SELECT * FROM unnest(%b::bytea[], %b::bytea[], %b::bytea[], %b::text[], %b::smallint[], %b::bigint[], "
    "%b::bigint[], %b::smallint[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::bigint[], "
    "%b::bytea[]) ON CONFLICT (trace_id, span_id) DO NOTHING"
)
# LISTEN/NOTIFY between the collectors sharing this database: "queued", "finished" (the queue), "spans" (commits),
# each tagged with the sending store (one per collector) so a collector does not wake itself twice.
CHANGES_CHANNEL = "agl_changes"
RETENTION_LOCK = 7283362  # pg_try_advisory_lock: one collector runs a retention pass at a time

_TRANSIENT = (psycopg.OperationalError, psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
# A row the database refuses (a constraint or trigger, a value it cannot hold): that span is rejected, not the batch.
_ROW_ERRORS = (psycopg.DataError, psycopg.IntegrityError)
_Write = tuple[Sequence[SpanRecord], "asyncio.Future[WriteResult]"]
logger = logging.getLogger(__name__)


class PostgresStore(SQLReads):
    writer_name = "the PostgreSQL writer"

    def __init__(self, url: str, *, max_batch_spans: int = 20_000, read_connections: int = 4) -> None:
        self.url = url
        self.conninfo = url.replace("postgres://", "postgresql://", 1)
        self.max_batch_spans = max_batch_spans
        self._pool = AsyncConnectionPool(
            self.conninfo, min_size=1, max_size=read_connections, open=False, kwargs={"autocommit": True}
        )
        # Rollout state runs blocking SQL shared with SQLite (rollout_state.py), so it gets a blocking pool.
        self._state_pool = ConnectionPool(self.conninfo, min_size=1, max_size=read_connections, open=False)
        self._writes: asyncio.Queue[tuple[Sequence[SpanRecord], asyncio.Future[WriteResult]] | None] = asyncio.Queue()
        self._writer_task: asyncio.Task[None] | None = None
        self._connection: psycopg.AsyncConnection | None = None
        self._scope_ids: dict[bytes, int] = {}
        self._writer_death = ""
        self._listener: asyncio.Task[None] | None = None
        self.sender = uuid.uuid4().hex[:12]  # names this collector's notices

    # --- lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as connection:
                await connection.execute("SELECT pg_advisory_lock(7283361)")  # two collectors creating at once
                await connection.execute(SCHEMA)
                for table, column, kind in ADDED_COLUMNS:  # a store made before these columns existed
                    await connection.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
                await connection.execute(RUN_INDEXES)
                await connection.execute("SELECT pg_advisory_unlock(7283361)")
            await self._pool.open(wait=True, timeout=30)
            await asyncio.to_thread(self._state_pool.open, wait=True, timeout=30)
        except psycopg.Error as exc:
            said = " ".join(str(exc).split())  # psycopg's hint is on a line of its own: one line here
            raise TransientStoreError(f"PostgreSQL at {self._safe_url()} unavailable: {said}") from exc
        self._writer_task = asyncio.create_task(self._write_loop(), name="agl-postgres-writer")

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
        if self._writer_task is not None:
            await self._writes.put(None)
            await self._writer_task
            self._writer_task = None
        if self._connection is not None:
            await self._connection.close()
            self._connection = None
        await self._pool.close()
        await asyncio.to_thread(self._state_pool.close)

    def _safe_url(self) -> str:
        return self.url.split("@")[-1]

    # --- writes ----------------------------------------------------------------------------------------------
    async def _through_writer(self, records: Sequence[SpanRecord]) -> WriteResult:
        task = self._writer_task
        if task is None or task.done():
            raise TransientStoreError(f"the PostgreSQL writer is not running{self._writer_death}")
        future: asyncio.Future[WriteResult] = asyncio.get_running_loop().create_future()
        await self._writes.put((records, future))
        return await future

    async def _write_loop(self) -> None:
        try:
            while await self._serve_one_batch():
                pass
        except BaseException as exc:  # a bug of ours: say so everywhere rather than hang every later write
            if not isinstance(exc, asyncio.CancelledError):
                logger.exception("lightning-otel collector: the PostgreSQL writer stopped")
            self._writer_death = f": it stopped on {type(exc).__name__}: {exc}"
            error = TransientStoreError(f"the PostgreSQL writer stopped ({type(exc).__name__}: {exc})")
            while not self._writes.empty():
                item = self._writes.get_nowait()
                if item is not None and not item[1].done():
                    item[1].set_exception(error)
            raise

    async def _serve_one_batch(self) -> bool:
        first = await self._writes.get()
        if first is None:
            return False
        batch, spans, stop = [first], len(first[0]), False
        while spans < self.max_batch_spans and not self._writes.empty():
            item = self._writes.get_nowait()
            if item is None:
                stop = True
                break
            batch.append(item)
            spans += len(item[0])
        writes = [(records, future) for records, future in batch if records is not PROBE]
        try:
            connection = await self._writer_connection()
            if writes:
                await self._commit(connection, writes)
            else:
                await connection.execute("SELECT 1")
                await connection.commit()
        except (psycopg.Error, OSError) as exc:  # the server went away, refused us, or the transaction failed
            await self._drop_writer_connection()
            fail_writes(batch, TransientStoreError(f"PostgreSQL write failed: {exc}"))
            return not stop
        except Exception as exc:  # a bug of ours: this batch is answered 503 (clients retry), the writer goes on
            logger.exception("lightning-otel collector: unexpected error in a PostgreSQL commit")
            await self._drop_writer_connection()
            fail_writes(
                batch, TransientStoreError(f"PostgreSQL write failed unexpectedly: {type(exc).__name__}: {exc}")
            )
            return not stop
        for records, future in batch:
            if records is PROBE and not future.done():
                future.set_result(WriteResult(0, 0))
        return not stop

    async def _writer_connection(self) -> psycopg.AsyncConnection:
        if self._connection is None or self._connection.closed:
            self._connection = await psycopg.AsyncConnection.connect(self.conninfo)
            self._scope_ids.clear()
        return self._connection

    async def _drop_writer_connection(self) -> None:
        self._scope_ids.clear()  # ids from a rolled-back transaction are gone
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.close()
            self._connection = None

    async def _scope_id(self, cursor: psycopg.AsyncCursor, record: SpanRecord) -> int:
        digest = record.scope_digest
        scope_id = self._scope_ids.get(digest)
        if scope_id is None:
            await cursor.execute(
                "INSERT INTO agl_scopes (digest, resource, scope) VALUES (%s, %s, %s) "
                "ON CONFLICT (digest) DO UPDATE SET digest = EXCLUDED.digest RETURNING id",
                (digest, record.resource_bytes, record.scope_bytes),
            )
            scope_id = (await cursor.fetchone())[0]  # type: ignore[index]
            self._scope_ids[digest] = scope_id
        return scope_id

    async def _commit(self, connection: psycopg.AsyncConnection, batch: list[_Write]) -> None:
        """One transaction for the whole batch. If a row is refused, the transaction is redone with each span in a
        savepoint, so that only the refused spans are left out (and reported); other errors propagate (503)."""
        try:
            results = await self._insert_batch(connection, batch, isolate=False)
        except _ROW_ERRORS:
            self._scope_ids.clear()  # the transaction was rolled back
            results = await self._insert_batch(connection, batch, isolate=True)
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def _insert_batch(
        self, connection: psycopg.AsyncConnection, batch: list[_Write], *, isolate: bool
    ) -> list[WriteResult]:
        results: list[WriteResult] = []
        async with connection.transaction(), connection.cursor() as cursor:
            await cursor.execute("SELECT pg_notify(%s, %s)", (CHANGES_CHANNEL, f"spans:{self.sender}"))  # on commit
            for records, _ in batch:
                if not isolate:
                    results.append(await self._insert(cursor, records))
                    continue
                inserted, rejected = 0, []
                for record in records:
                    try:
                        async with connection.transaction():  # a savepoint
                            inserted += (await self._insert(cursor, [record])).inserted
                    except _ROW_ERRORS as exc:
                        self._scope_ids.clear()  # a scope row inserted for this span is rolled back too
                        rejected.append(refusal(record, exc))
                results.append(WriteResult(inserted, len(records) - inserted - len(rejected), rejected))
        return results

    async def _insert(self, cursor: psycopg.AsyncCursor, records: Sequence[SpanRecord]) -> WriteResult:
        scope_ids = self._scope_ids
        for record in records:  # register new (resource, scope) pairs first
            if record.scope_digest not in scope_ids:
                await self._scope_id(cursor, record)
        columns = [
            [r.trace_id for r in records],
            [r.span_id for r in records],
            [r.parent_span_id for r in records],
            [r.name for r in records],
            [r.kind for r in records],
            [r.start_ns for r in records],
            [r.end_ns for r in records],
            [r.status_code for r in records],
            [r.service_name for r in records],
            [r.rollout_id for r in records],
            [r.attempt_id for r in records],
            [r.agent_name for r in records],
            [r.operation for r in records],
            [scope_ids[r.scope_digest] for r in records],
            [r.span_bytes for r in records],
        ]
        # %b: binary parameters, so span bytes travel as they are instead of escaped text.
        await cursor.execute(_INSERT, columns)
        return WriteResult(cursor.rowcount, len(records) - cursor.rowcount)

    # --- the other collectors ---------------------------------------------------------------------------------
    async def listen(self, on_change: Callable[[str], None]) -> bool:
        self._listener = asyncio.create_task(self._listen(on_change), name="agl-postgres-listen")
        return True

    async def _listen(self, on_change: Callable[[str], None]) -> None:
        """LISTEN on a connection of its own; after a lost connection, reconnect and report every topic changed
        (what happened meanwhile is unknown)."""
        pause = 0.5
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as connection:
                    await connection.execute(f"LISTEN {CHANGES_CHANNEL}")
                    pause = 0.5
                    for topic in ("queued", "finished", "spans"):
                        on_change(topic)
                    async for notice in connection.notifies():
                        topic, _, sender = notice.payload.partition(":")
                        if sender != self.sender:
                            on_change(topic)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                logger.warning("listening for the other collectors' changes failed (%s): again in %.1f s", exc, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)

    async def retention_pass(self, end_ns: int, every_s: float) -> int | None:
        """One collector of those sharing the database deletes, once per `every_s`: the pass takes a transaction
        lock and records when it ran (`agl_cursors`), so the others skip it (None)."""
        async with self._pool.connection() as connection, connection.transaction():
            locked = await (
                await connection.execute("SELECT pg_try_advisory_xact_lock(%s)", (RETENTION_LOCK,))
            ).fetchone()
            if not (locked and locked[0]):
                return None
            now = time.time_ns()
            last = await (
                await connection.execute("SELECT seq FROM agl_cursors WHERE name = 'retention_ns'")
            ).fetchone()
            if last and now - int(last[0]) < every_s * 0.9e9:
                return None
            await connection.execute(
                "INSERT INTO agl_cursors (name, seq) VALUES ('retention_ns', %s) "
                "ON CONFLICT (name) DO UPDATE SET seq = excluded.seq", (now,),
            )  # fmt: skip
            return (await connection.execute("DELETE FROM agl_spans WHERE end_ns < %s", (end_ns,))).rowcount

    # --- rollout state ---------------------------------------------------------------------------------------
    async def state_transaction(self, work: Callable[[StateTransaction], T]) -> T:
        def run() -> T:
            with self._state_pool.connection() as connection, connection.transaction():
                return work(_PostgresTransaction(connection, self.sender))

        try:
            return await asyncio.to_thread(run)
        except _TRANSIENT as exc:
            raise TransientStoreError(f"PostgreSQL rollout-state transaction failed: {exc}") from exc

    # --- reads -----------------------------------------------------------------------------------------------
    async def _read(self, sql: str, parameters: Sequence[object] = ()) -> list[tuple]:
        return await self._on_pool(sql, parameters, fetch=True)  # type: ignore[return-value]

    async def _execute(self, sql: str, parameters: Sequence[object] = ()) -> int:
        return await self._on_pool(sql, parameters, fetch=False)  # type: ignore[return-value]

    async def _on_pool(self, sql: str, parameters: Sequence[object], *, fetch: bool) -> list[tuple] | int:
        # A second try: pooled connections opened before a server restart fail once, then are replaced.
        for attempt in (1, 2):
            try:
                async with self._pool.connection() as connection, connection.cursor() as cursor:
                    # Our SQL uses `?` placeholders (shared with SQLite); binary results: bytea as raw bytes.
                    await cursor.execute(sql.replace("?", "%s"), parameters, binary=True)
                    return await cursor.fetchall() if fetch else cursor.rowcount
            except _TRANSIENT as exc:
                if attempt == 2:
                    raise TransientStoreError(f"PostgreSQL query failed: {exc}") from exc
        raise AssertionError("unreachable")

    async def rollouts(self, limit: int = 100, since_ns: int | None = None) -> list[RolloutSummary]:
        rows = await self._read(
            "SELECT rollout_id, COUNT(*), MIN(start_ns), MAX(end_ns), "
            "array_agg(DISTINCT agent_name) FILTER (WHERE agent_name IS NOT NULL), "
            "array_agg(DISTINCT attempt_id) FILTER (WHERE attempt_id IS NOT NULL), MAX(seq) AS last "
            "FROM agl_spans WHERE rollout_id IS NOT NULL AND end_ns >= ? "
            "GROUP BY rollout_id ORDER BY last DESC LIMIT ?",
            (since_ns or 0, limit),
        )
        return [
            RolloutSummary(row[0], row[1], row[2], row[3], sorted(row[4] or []), sorted(row[5] or [])) for row in rows
        ]

    async def delete_before(self, end_ns: int) -> int:
        return await self._execute("DELETE FROM agl_spans WHERE end_ns < ?", (end_ns,))


class _PostgresTransaction:
    for_update = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"  # two collectors claiming at once take different rollouts

    def __init__(self, connection: psycopg.Connection, sender: str) -> None:
        self._connection, self._sender = connection, sender

    def execute(self, sql: str, parameters: Sequence[object] = ()) -> list[tuple]:
        cursor = self._connection.execute(sql.replace("?", "%s"), parameters)
        return cursor.fetchall() if cursor.description else []

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        with self._connection.cursor() as cursor:
            cursor.executemany(sql.replace("?", "%s"), rows)

    def notify(self, topic: str) -> None:
        self._connection.execute("SELECT pg_notify(%s, %s)", (CHANGES_CHANNEL, f"{topic}:{self._sender}"))

    def serialize(self, name: str) -> None:
        self._connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))
