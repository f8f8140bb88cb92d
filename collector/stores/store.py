"""The store interface every backend implements (SQLite embedded, PostgreSQL at scale).

A store knows spans and SQL, never HTTP. Writes return only after the spans are committed (the receivers answer
after that), and are deduplicated on (trace_id, span_id). `seq` is the ingest order: rollout reads come back in
it, and the forwarding outbox tails it with a persisted cursor.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from lightning_otel.collector.stores.span_record import SpanRecord


class StateTransaction(Protocol):
    """One open transaction of a store; `?` placeholders in every dialect."""

    for_update: str  # " FOR UPDATE" where the database has row locks, "" where the transaction is exclusive
    skip_locked: str  # " FOR UPDATE SKIP LOCKED" or ""

    def execute(self, sql: str, parameters: Sequence[object] = ()) -> list[tuple]: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None: ...

    def notify(self, topic: str) -> None:
        """Tell the other collectors on this store, when the transaction commits, that `topic` changed ("queued",
        "finished"); a no-op where no other collector can share the store (SQLite)."""
        ...

    def serialize(self, name: str) -> None:
        """Hold the lock named `name` until the transaction ends, so transactions taking it run one at a time (one
        that numbers rows MAX + 1); a no-op where the transaction is exclusive already (SQLite)."""
        ...


T = TypeVar("T")


class TransientStoreError(RuntimeError):
    """The store cannot take writes right now (locked, disk full, connection lost): clients should retry (503)."""


@dataclass(slots=True)
class StoredSpan:
    seq: int
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    service_name: str
    span_bytes: bytes
    resource_bytes: bytes
    scope_bytes: bytes


@dataclass(slots=True)
class WriteResult:
    inserted: int
    duplicates: int
    rejected: list[str] = field(default_factory=list)  # why each span the database refused was left out


class WriterProbe(tuple):
    """A write of nothing that a store's writer answers itself: `SpanStore.problem()` sends one through the same
    queue as exports. Its own type, so it is never mistaken for a request's records."""


PROBE = WriterProbe()
PROBE_TIMEOUT_S = 5.0


def fail_writes(batch: Sequence[tuple[object, Any]], error: Exception) -> None:
    """Answer every (records, future) of a writer's batch with `error` (futures of either kind)."""
    for _, future in batch:
        if not future.done():
            future.set_exception(error)


def refusal(record: SpanRecord, error: BaseException) -> str:
    """The reason reported (partial_success, log) for a span whose row the database refused."""
    return f"span {record.name!r} ({record.trace_id.hex()}/{record.span_id.hex()}) refused by the store: {error}"


@dataclass(slots=True)
class RolloutSummary:
    rollout_id: str
    span_count: int
    start_ns: int
    end_ns: int
    agents: list[str]
    attempts: list[str]


@dataclass(slots=True)
class TraceQuery:
    """Jaeger-style search: a trace matches when one of its spans matches every condition given."""

    service: str | None = None
    operation: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    start_ns: int | None = None
    end_ns: int | None = None
    min_duration_ns: int | None = None
    max_duration_ns: int | None = None
    limit: int = 20


class SpanStore(abc.ABC):
    """Async interface; implementations run blocking database work off the event loop."""

    url: str

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def write(self, records: Sequence[SpanRecord]) -> WriteResult:
        """Commit `records` (duplicates ignored); returns once they are durable. A row the database refuses is
        left out and reported in `WriteResult.rejected`; a store that cannot write raises `TransientStoreError`."""

    @abc.abstractmethod
    async def problem(self) -> str | None:
        """Why the store cannot take writes now (probed through the writer itself), or None when it can."""

    @abc.abstractmethod
    async def rollout_spans(self, rollout_id: str, attempt_id: str | None = None) -> list[StoredSpan]:
        """Spans of a rollout (one attempt, `"latest"`, or all with None) in ingest order."""

    async def attempts_spans(self, wanted: Sequence[tuple[str, str | None]]) -> list[list[StoredSpan]]:
        """`rollout_spans` of many (rollout id, attempt id) pairs at once, in `wanted`'s order (a training batch, a
        page of an export): a backend may read them in fewer queries than one each."""
        return list(await asyncio.gather(*(self.rollout_spans(rollout_id, attempt) for rollout_id, attempt in wanted)))

    @abc.abstractmethod
    async def trace_spans(self, trace_id: bytes) -> list[StoredSpan]: ...

    @abc.abstractmethod
    async def find_trace_ids(self, query: TraceQuery) -> list[bytes]:
        """Trace ids matching `query` (tags are checked by the caller on candidate spans), newest first."""

    @abc.abstractmethod
    async def candidate_spans(self, query: TraceQuery, limit: int) -> list[StoredSpan]:
        """Spans matching every condition of `query` except tags, newest first."""

    @abc.abstractmethod
    async def services(self) -> list[str]: ...

    @abc.abstractmethod
    async def operations(self, service: str | None = None) -> list[tuple[str, int]]:
        """(span name, span kind) pairs, for one service or all."""

    @abc.abstractmethod
    async def rollouts(self, limit: int = 100, since_ns: int | None = None) -> list[RolloutSummary]: ...

    @abc.abstractmethod
    async def delete_before(self, end_ns: int) -> int:
        """Retention: delete spans that ended before `end_ns`; returns how many."""

    @abc.abstractmethod
    async def spans_after(self, seq: int, limit: int) -> list[StoredSpan]:
        """Spans with `seq` greater than `seq`, in order (the forwarding outbox)."""

    @abc.abstractmethod
    async def get_cursor(self, name: str) -> int: ...

    @abc.abstractmethod
    async def set_cursor(self, name: str, seq: int) -> None: ...

    @abc.abstractmethod
    async def span_count(self) -> int: ...

    async def listen(self, on_change: Callable[[str], None]) -> bool:
        """Call `on_change(topic)` when another collector on this store changed `topic` ("queued", "finished",
        "spans"); False where none can (the default: SQLite has one collector)."""
        return False

    async def retention_pass(self, end_ns: int, every_s: float) -> int | None:
        """Delete the spans that ended before `end_ns`, unless another collector on this store did within `every_s`
        (then None): one retention pass per interval, however many collectors share the store."""
        return await self.delete_before(end_ns)

    @abc.abstractmethod
    async def state_transaction(self, work: Callable[[StateTransaction], T]) -> T:
        """Run `work` (blocking SQL over the rollout-state tables) in one transaction off the event loop; it is
        rolled back if `work` raises. Serializable with every other state transaction on the same row."""
