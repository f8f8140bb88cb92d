"""Rollout state: the training queue the trainer fills and runners drain, kept in the collector's store.

A rollout is one run of the agent on one task. It waits `queuing` until a runner claims it, which starts an
attempt (`at-1`, `at-2`, ...) and makes it `running`. The runner reports the attempt `succeeded` or `failed`; an
attempt whose runner stops sending heartbeats (a span of the attempt arriving counts as one) or that runs past the
rollout's `timeout_s` becomes `timeout`. A failed or timed-out attempt puts the rollout back in the queue until
`max_attempts` attempts were made; then the rollout ends `failed` or `timeout`. `cancelled` ends it from outside.
Resources (e.g. the `main_llm` endpoint) are versioned snapshots; each attempt records the version it ran with.

Every operation is one transaction of plain SQL with `?` placeholders, so SQLite and PostgreSQL share this logic;
PostgreSQL adds row locks where SQLite's `BEGIN IMMEDIATE` already serializes writers. Waiting is event-driven in
this process (enqueue, completion and expiry wake the waiters), with a slow re-check for changes made by another
collector sharing the same PostgreSQL store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from lightning_otel.collector.change_signal import ChangeSignal
from lightning_otel.collector.otlp_decoding import SpanRecord
from lightning_otel.collector.queue_schema import (
    CANCELLED,
    FAILED,
    FINAL_STATUSES,
    MODES,
    QUEUING,
    REPORTABLE_STATUSES,
    RUNNING,
    SUCCEEDED,
    TIMEOUT,
)
from lightning_otel.collector.store import SpanStore, StateTransaction

log = logging.getLogger("lightning_otel.collector.rollouts")
# What a wait returns besides the counts: every record, the final ones only, or none.
WAIT_RECORDS = ("all", "final", "none")

_ROLLOUT_COLUMNS = (
    "rollout_id, task_id, group_id, mode, input, metadata, status, max_attempts, timeout_s, attempts, attempt_id, "
    "resources_version, reward, error, created_ns, updated_ns, end_ns"
)

_ROLLOUT_COLUMNS_OF_R = ", ".join(f"r.{column}" for column in _ROLLOUT_COLUMNS.split(", "))

_ATTEMPT_FIELDS = (
    "attempt_id",
    "number",
    "status",
    "runner_id",
    "resources_version",
    "start_ns",
    "heartbeat_ns",
    "end_ns",
    "error",
    "reward",
)


@dataclass(frozen=True, slots=True)
class AttemptReport:
    """A runner's word on one attempt."""

    rollout_id: str
    attempt_id: str
    status: str
    error: str | None = None
    reward: float | None = None


class InvalidRequest(ValueError):
    """A rollout-state request that cannot be honoured as given (HTTP 400)."""


class NotFound(LookupError):
    """No such rollout or resources version (HTTP 404)."""


@dataclass(slots=True)
class RolloutSpec:
    """What the trainer enqueues: one task to run `max_attempts` times at most."""

    input: Any
    task_id: str | None = None
    group_id: str | None = None
    mode: str = "train"
    rollout_id: str | None = None
    max_attempts: int = 3
    timeout_s: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    resources_version: int | None = None  # None: the latest version when claimed

    @classmethod
    def from_json(cls, data: object) -> RolloutSpec:
        if not isinstance(data, dict) or "input" not in data:
            raise InvalidRequest('each rollout must be an object with an "input"')
        unknown = set(data) - {f for f in cls.__slots__}  # type: ignore[attr-defined]
        if unknown:
            raise InvalidRequest(f"unknown rollout fields: {sorted(unknown)}")
        spec = cls(**data)
        if spec.mode not in MODES:
            raise InvalidRequest(f"mode must be one of {sorted(MODES)}, got {spec.mode!r}")
        if not isinstance(spec.max_attempts, int) or spec.max_attempts < 1:
            raise InvalidRequest(f"max_attempts must be an integer >= 1, got {spec.max_attempts!r}")
        if spec.timeout_s is not None and (not isinstance(spec.timeout_s, (int, float)) or spec.timeout_s <= 0):
            raise InvalidRequest(f"timeout_s must be a positive number, got {spec.timeout_s!r}")
        if not isinstance(spec.metadata, dict):
            raise InvalidRequest("metadata must be an object")
        return spec


def _rollout_json(row: Sequence[Any]) -> dict[str, Any]:
    names = _ROLLOUT_COLUMNS.split(", ")
    record = dict(zip(names, row, strict=True))
    record["input"] = orjson.loads(record["input"])
    record["metadata"] = orjson.loads(record["metadata"])
    return record


def _attempt_json(row: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(_ATTEMPT_FIELDS, row, strict=True))


# --- the operations, each run inside one transaction ------------------------------------------------------------
def enqueue(
    tx: StateTransaction, specs: Sequence[RolloutSpec], now: int, existing_ok: bool = False
) -> list[dict[str, Any]]:
    """Queue the rollouts; with `existing_ok`, ids already queued are left as they are and returned (a client's
    repeat of a request whose answer it lost), else they are an error."""
    rows = []
    for index, spec in enumerate(specs):
        rollout_id = spec.rollout_id or f"ro-{uuid.uuid4().hex[:16]}"
        task_id = spec.task_id or rollout_id
        rows.append(
            (
                rollout_id,
                now + index,  # queue order: first in, first claimed
                task_id,
                spec.group_id or task_id,
                spec.mode,
                orjson.dumps(spec.input).decode(),
                orjson.dumps(spec.metadata).decode(),
                QUEUING,
                spec.max_attempts,
                spec.timeout_s,
                0,
                spec.resources_version,
                now,
                now,
            )
        )
    if len({row[0] for row in rows}) != len(rows):
        raise InvalidRequest("rollout_id repeated within one request")
    placeholders = ", ".join("?" * 14)
    existing = _existing_ids(tx, [row[0] for row in rows])
    if existing and not existing_ok:
        raise InvalidRequest(f"rollout ids already exist: {sorted(existing)[:5]}")
    ids = [row[0] for row in rows]
    rows = [row for row in rows if row[0] not in existing]
    if rows:
        tx.executemany(
            "INSERT INTO agl_rollouts (rollout_id, position, task_id, group_id, mode, input, metadata, status, "
            f"max_attempts, timeout_s, attempts, resources_version, created_ns, updated_ns) VALUES ({placeholders})",
            rows,
        )
    return get_rollouts(tx, ids)


def _existing_ids(tx: StateTransaction, rollout_ids: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for chunk in _chunks(rollout_ids):
        marks = ", ".join("?" * len(chunk))
        found.update(
            r[0] for r in tx.execute(f"SELECT rollout_id FROM agl_rollouts WHERE rollout_id IN ({marks})", chunk)
        )
    return found


def _chunks(items: Sequence[str], size: int = 500) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def claim(tx: StateTransaction, runner_id: str, limit: int, now: int) -> list[dict[str, Any]]:
    """Start an attempt on up to `limit` queued rollouts, oldest first."""
    rows = tx.execute(
        "SELECT rollout_id, attempts, resources_version FROM agl_rollouts WHERE status = ? "
        f"ORDER BY position LIMIT ?{tx.skip_locked}",
        (QUEUING, limit),
    )
    if not rows:
        return []
    latest = tx.execute("SELECT MAX(version) FROM agl_resources")[0][0]
    attempts, updates = [], []
    for rollout_id, made, pinned in rows:
        number = made + 1
        attempt_id = f"at-{number}"
        version = pinned if pinned is not None else latest
        attempts.append((rollout_id, attempt_id, number, RUNNING, runner_id, version, now, now))
        updates.append((RUNNING, number, attempt_id, now, rollout_id))
    tx.executemany(
        "UPDATE agl_rollouts SET status = ?, attempts = ?, attempt_id = ?, updated_ns = ? WHERE rollout_id = ?",
        updates,
    )
    tx.executemany(
        "INSERT INTO agl_attempts (rollout_id, attempt_id, number, status, runner_id, resources_version, start_ns, "
        "heartbeat_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        attempts,
    )
    by_id = {record["rollout_id"]: record for record in get_rollouts(tx, [row[0] for row in rows])}
    claimed = []
    for rollout_id, attempt_id, number, _, _, version, _, _ in attempts:
        record = by_id[rollout_id]
        record.update(attempt_id=attempt_id, attempt_number=number, resources_version=version)
        claimed.append(record)
    return claimed


def heartbeat(tx: StateTransaction, attempts: Sequence[tuple[str, str]], now: int) -> list[dict[str, str]]:
    """Mark attempts alive; returns those no longer running (the runner should stop them) with their status."""
    tx.executemany(
        "UPDATE agl_attempts SET heartbeat_ns = ? WHERE rollout_id = ? AND attempt_id = ? AND status = ?",
        [(now, rollout_id, attempt_id, RUNNING) for rollout_id, attempt_id in attempts],
    )
    stop = []
    for rollout_id, attempt_id in attempts:
        found = tx.execute(
            "SELECT status FROM agl_attempts WHERE rollout_id = ? AND attempt_id = ?", (rollout_id, attempt_id)
        )
        status = found[0][0] if found else "unknown"
        if status != RUNNING:
            stop.append({"rollout_id": rollout_id, "attempt_id": attempt_id, "status": status})
    return stop


def finish_attempt(
    tx: StateTransaction,
    rollout_id: str,
    attempt_id: str,
    status: str,
    now: int,
    *,
    error: str | None = None,
    reward: float | None = None,
) -> tuple[bool, str | None]:
    """End a running attempt; returns (accepted, the rollout's status). Only the first ending of an attempt counts:
    a late report from a runner whose attempt already timed out is not accepted."""
    won = tx.execute(
        "UPDATE agl_attempts SET status = ?, end_ns = ?, error = ?, reward = ? "
        "WHERE rollout_id = ? AND attempt_id = ? AND status = ? RETURNING number",
        (status, now, error, reward, rollout_id, attempt_id, RUNNING),
    )
    found = tx.execute(
        f"SELECT attempts, max_attempts, status FROM agl_rollouts WHERE rollout_id = ?{tx.for_update}", (rollout_id,)
    )
    if not found:
        raise NotFound(f"no rollout {rollout_id!r}")
    made, max_attempts, current = found[0]
    if not won or current != RUNNING:
        return bool(won), current
    if status == SUCCEEDED:
        outcome = SUCCEEDED
    elif status == CANCELLED:
        outcome = CANCELLED
    elif made < max_attempts:
        outcome = QUEUING  # retried by the next claim
    else:
        outcome = status
    tx.execute(
        "UPDATE agl_rollouts SET status = ?, updated_ns = ?, end_ns = ?, reward = ?, error = ? WHERE rollout_id = ?",
        (outcome, now, now if outcome in FINAL_STATUSES else None, reward, error, rollout_id),
    )
    return True, outcome


def expire(tx: StateTransaction, now: int, heartbeat_timeout_ns: int) -> list[tuple[str, str, str]]:
    """Time out running attempts that went silent or ran past their rollout's timeout; returns what changed."""
    rows = tx.execute(
        "SELECT a.rollout_id, a.attempt_id, a.heartbeat_ns < ? FROM agl_attempts a "
        "JOIN agl_rollouts r ON r.rollout_id = a.rollout_id WHERE a.status = ? "
        "AND (a.heartbeat_ns < ? OR (r.timeout_s IS NOT NULL AND a.start_ns + r.timeout_s * 1e9 < ?))",
        (now - heartbeat_timeout_ns, RUNNING, now - heartbeat_timeout_ns, now),
    )
    changed = []
    for rollout_id, attempt_id, silent in rows:
        reason = "no heartbeat from the runner" if silent else "rollout ran past its timeout_s"
        accepted, outcome = finish_attempt(tx, rollout_id, attempt_id, TIMEOUT, now, error=reason)
        if accepted and outcome is not None:
            changed.append((rollout_id, attempt_id, outcome))
    return changed


def fail_runner(tx: StateTransaction, runner_id: str, error: str, now: int) -> list[tuple[str, str, str]]:
    """A runner is known dead (its process exited): fail its running attempts now instead of waiting for timeouts."""
    rows = tx.execute(
        "SELECT rollout_id, attempt_id FROM agl_attempts WHERE runner_id = ? AND status = ?", (runner_id, RUNNING)
    )
    changed = []
    for rollout_id, attempt_id in rows:
        accepted, outcome = finish_attempt(tx, rollout_id, attempt_id, FAILED, now, error=error)
        if accepted and outcome is not None:
            changed.append((rollout_id, attempt_id, outcome))
    return changed


def cancel(tx: StateTransaction, rollout_ids: Sequence[str], now: int) -> int:
    cancelled = 0
    for chunk in _chunks(rollout_ids):
        marks = ", ".join("?" * len(chunk))
        tx.execute(
            f"UPDATE agl_attempts SET status = ?, end_ns = ?, error = ? WHERE status = ? AND rollout_id IN ({marks})",
            (CANCELLED, now, "cancelled", RUNNING, *chunk),
        )
        cancelled += len(
            tx.execute(
                f"UPDATE agl_rollouts SET status = ?, updated_ns = ?, end_ns = ? WHERE status IN (?, ?) "
                f"AND rollout_id IN ({marks}) RETURNING rollout_id",
                (CANCELLED, now, now, QUEUING, RUNNING, *chunk),
            )
        )
    return cancelled


def get_rollouts(tx: StateTransaction, rollout_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Records in the order asked; unknown ids are left out."""
    found: dict[str, dict[str, Any]] = {}
    for chunk in _chunks(rollout_ids):
        marks = ", ".join("?" * len(chunk))
        rows = tx.execute(
            f"SELECT {_ROLLOUT_COLUMNS_OF_R}, a.runner_id FROM agl_rollouts r LEFT JOIN agl_attempts a "
            f"ON a.rollout_id = r.rollout_id AND a.attempt_id = r.attempt_id WHERE r.rollout_id IN ({marks})",
            chunk,
        )
        for *row, runner_id in rows:
            found[row[0]] = {**_rollout_json(row), "runner_id": runner_id}  # the runner of its latest attempt
    return [found[rollout_id] for rollout_id in rollout_ids if rollout_id in found]


def get_rollout_detail(tx: StateTransaction, rollout_id: str) -> dict[str, Any]:
    records = get_rollouts(tx, [rollout_id])
    if not records:
        raise NotFound(f"no rollout {rollout_id!r}")
    rows = tx.execute(
        f"SELECT {', '.join(_ATTEMPT_FIELDS)} FROM agl_attempts WHERE rollout_id = ? ORDER BY number",
        (rollout_id,),
    )
    return {**records[0], "attempt_list": [_attempt_json(row) for row in rows]}


def unfinished(tx: StateTransaction, rollout_ids: Sequence[str]) -> dict[str, str]:
    """Those of `rollout_ids` still queued or running, with that status."""
    left: dict[str, str] = {}
    for chunk in _chunks(rollout_ids):
        marks = ", ".join("?" * len(chunk))
        rows = tx.execute(
            f"SELECT rollout_id, status FROM agl_rollouts WHERE rollout_id IN ({marks}) AND status IN (?, ?)",
            (*chunk, QUEUING, RUNNING),
        )
        left.update((row[0], row[1]) for row in rows)
    return left


def list_rollouts(tx: StateTransaction, status: str | None, limit: int) -> list[dict[str, Any]]:
    if status is None:
        rows = tx.execute("SELECT rollout_id FROM agl_rollouts ORDER BY position DESC LIMIT ?", (limit,))
    else:
        rows = tx.execute(
            "SELECT rollout_id FROM agl_rollouts WHERE status = ? ORDER BY position LIMIT ?", (status, limit)
        )
    return get_rollouts(tx, [row[0] for row in rows])  # in that order, each with its latest attempt's runner


PAGE_ORDERS = ("position", "group")


def page_rollouts(
    tx: StateTransaction, status: str | None, order: str, after: str | None, limit: int
) -> tuple[list[dict[str, Any]], str | None]:
    """Every rollout, oldest first, one page at a time (keyset paging, so a large store is read in flat memory):
    by queue position, or by group then position (a group's rollouts next to each other). `after` is the cursor
    the previous page returned; the next one is None after the last page."""
    if order not in PAGE_ORDERS:
        raise InvalidRequest(f"order must be one of {list(PAGE_ORDERS)}, got {order!r}")
    where: list[str] = []
    parameters: list[object] = []
    if status is not None:
        where.append("status = ?")
        parameters.append(status)
    if after:
        position_text, _, group_id = after.partition(":")
        try:
            position = int(position_text)
        except ValueError:
            raise InvalidRequest(f"after: not a cursor this route returned: {after!r}") from None
        if order == "position":
            where.append("position > ?")
            parameters.append(position)
        else:
            where.append("(group_id > ? OR (group_id = ? AND position > ?))")
            parameters += [group_id, group_id, position]
    sort = "position" if order == "position" else "group_id, position"
    rows = tx.execute(
        f"SELECT rollout_id, position, group_id FROM agl_rollouts{' WHERE ' + ' AND '.join(where) if where else ''} "
        f"ORDER BY {sort} LIMIT ?",
        (*parameters, limit),
    )
    cursor = None
    if len(rows) == limit:
        _, position, group_id = rows[-1]
        cursor = str(position) if order == "position" else f"{position}:{group_id}"
    return get_rollouts(tx, [row[0] for row in rows]), cursor


def status_counts(tx: StateTransaction, status: str | None = None) -> dict[str, int]:
    """Rollouts by status; with `status`, that one only (its range of the status index, not the whole table)."""
    if status is not None:
        return {status: tx.execute("SELECT COUNT(*) FROM agl_rollouts WHERE status = ?", (status,))[0][0]}
    counts = dict.fromkeys((QUEUING, RUNNING, SUCCEEDED, FAILED, TIMEOUT, CANCELLED), 0)
    counts.update(
        {status: count for status, count in tx.execute("SELECT status, COUNT(*) FROM agl_rollouts GROUP BY status")}
    )
    return counts


def put_resources(tx: StateTransaction, resources: dict[str, Any], now: int) -> int:
    rows = tx.execute(
        "INSERT INTO agl_resources (version, resources, created_ns) "
        "SELECT COALESCE(MAX(version), 0) + 1, ?, ? FROM agl_resources RETURNING version",
        (orjson.dumps(resources).decode(), now),
    )
    return rows[0][0]


def get_resources(tx: StateTransaction, version: int | None) -> dict[str, Any]:
    if version is None:
        rows = tx.execute("SELECT version, resources, created_ns FROM agl_resources ORDER BY version DESC LIMIT 1")
    else:
        rows = tx.execute("SELECT version, resources, created_ns FROM agl_resources WHERE version = ?", (version,))
    if not rows:
        raise NotFound("no resources yet" if version is None else f"no resources version {version}")
    return {"version": rows[0][0], "resources": orjson.loads(rows[0][1]), "created_ns": rows[0][2]}


T = TypeVar("T")


def _telling(
    work: Callable[[StateTransaction], T], topics: Callable[[T], Iterable[str]]
) -> Callable[[StateTransaction], T]:
    """`work`, then a notice to the other collectors on the store of what changed (delivered on commit)."""

    def run(tx: StateTransaction) -> T:
        result = work(tx)
        for topic in topics(result):
            tx.notify(topic)
        return result

    return run


def _topics_of_ended(changed: Sequence[tuple[str, str, str]]) -> tuple[str, ...]:
    if not changed:
        return ()
    return ("finished", "queued") if any(outcome == QUEUING for _, _, outcome in changed) else ("finished",)


class _EndedWatch:
    """The endings announced while one `wait` runs: (rollout id, its status now); `unseen` when an ending was
    signalled that names no rollout."""

    __slots__ = ("ended", "unseen")

    def __init__(self) -> None:
        self.ended: list[tuple[str, str]] = []
        self.unseen = False

    def clear(self) -> None:
        self.ended.clear()
        self.unseen = False

    def apply(self, pending: dict[str, str]) -> None:
        """Take the rollouts that became final off `pending`; a retried one is queuing again."""
        for rollout_id, status in self.ended:
            if rollout_id in pending:
                if status in FINAL_STATUSES:
                    del pending[rollout_id]
                elif status == QUEUING:
                    pending[rollout_id] = QUEUING
        self.ended.clear()


# --- the collector-side service ---------------------------------------------------------------------------------
class RolloutState:
    """Rollout queue operations over a store, with event-driven waits and the heartbeat watchdog."""

    def __init__(
        self,
        store: SpanStore,
        *,
        heartbeat_timeout_s: float = 30.0,
        recheck_s: float = 1.0,
    ) -> None:
        self.store = store
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.recheck_s = recheck_s  # catches changes made by another collector on a shared PostgreSQL
        self.queued = ChangeSignal()  # something became claimable
        self.finished = ChangeSignal()  # an attempt or rollout ended
        self._ended_watches: set[_EndedWatch] = set()  # one per sleeping `wait`: what this collector announced
        self._span_heartbeats: dict[tuple[str, str], int] = {}
        self._watchdog: asyncio.Task[None] | None = None
        self._closing = False  # long-polls answer at once, so the servers can drain
        # Runners known dead. A dead runner's claim may still be parked in a long-poll here; without this it would
        # take the very rollouts its death requeued and hold them until their heartbeat timeout.
        self._lost_runners: set[str] = set()

    @property
    def heartbeat_interval_s(self) -> float:
        return max(self.heartbeat_timeout_s / 3, 0.05)

    def start(self) -> None:
        self._watchdog = asyncio.create_task(self._watch(), name="agl-rollout-watchdog")

    async def stop(self) -> None:
        self._closing = True
        self.queued.notify()
        self.ended_unseen()
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None

    # spans are heartbeats: recorded in memory on ingest, written by the watchdog before it looks for silent attempts
    def spans_committed(self, records: Sequence[SpanRecord]) -> None:
        now = time.time_ns()
        for record in records:
            if record.rollout_id is not None and record.attempt_id:
                self._span_heartbeats[(record.rollout_id, record.attempt_id)] = now

    async def _watch(self) -> None:
        interval = min(max(self.heartbeat_timeout_s / 4, 0.05), 1.0)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.check_expired()
            except Exception:
                log.exception("rollout watchdog: checking attempts failed; trying again")

    async def check_expired(self) -> list[tuple[str, str, str]]:
        beats, self._span_heartbeats = self._span_heartbeats, {}
        timeout_ns = int(self.heartbeat_timeout_s * 1e9)

        def work(tx: StateTransaction) -> list[tuple[str, str, str]]:
            if beats:
                tx.executemany(
                    "UPDATE agl_attempts SET heartbeat_ns = ? WHERE rollout_id = ? AND attempt_id = ? AND status = ? "
                    "AND heartbeat_ns < ?",
                    [(ns, rollout_id, attempt_id, RUNNING, ns) for (rollout_id, attempt_id), ns in beats.items()],
                )
            return expire(tx, time.time_ns(), timeout_ns)

        changed = await self.store.state_transaction(_telling(work, _topics_of_ended))
        self._announce(changed)
        return changed

    def _announce(self, changed: Sequence[tuple[str, str, str]]) -> None:
        if not changed:
            return
        for rollout_id, attempt_id, outcome in changed:
            log.info("rollout %s attempt %s ended; rollout now %s", rollout_id, attempt_id, outcome)
        for watch in self._ended_watches:
            watch.ended.extend((rollout_id, outcome) for rollout_id, _, outcome in changed)
        self.finished.notify()
        if any(outcome == QUEUING for _, _, outcome in changed):
            self.queued.notify()

    def ended_unseen(self) -> None:
        """Attempts or rollouts ended without this collector knowing which (another collector on the same database,
        a cancel): every waiter checks the store."""
        for watch in self._ended_watches:
            watch.unseen = True
        self.finished.notify()

    # --- operations ------------------------------------------------------------------------------------------
    async def enqueue(self, specs: Sequence[RolloutSpec], *, existing_ok: bool = False) -> list[dict[str, Any]]:
        work = _telling(lambda tx: enqueue(tx, specs, time.time_ns(), existing_ok), lambda _: ("queued",))
        records = await self.store.state_transaction(work)
        self.queued.notify()
        return records

    async def claim(self, runner_id: str, limit: int, wait_s: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + min(wait_s, 300.0)
        while True:
            generation = self.queued.generation
            if runner_id in self._lost_runners:
                return []
            claimed = await self.store.state_transaction(lambda tx: claim(tx, runner_id, limit, time.time_ns()))
            remaining = deadline - time.monotonic()
            if claimed or remaining <= 0 or self._closing:
                return claimed
            await self.queued.wait(min(remaining, self.recheck_s), after=generation)

    async def heartbeat(self, attempts: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        return await self.store.state_transaction(lambda tx: heartbeat(tx, attempts, time.time_ns()))

    async def complete(
        self, rollout_id: str, attempt_id: str, status: str, *, error: str | None = None, reward: float | None = None
    ) -> tuple[bool, str | None]:
        (result,) = await self.complete_many([AttemptReport(rollout_id, attempt_id, status, error, reward)])
        if result[1] is None:
            raise NotFound(f"no rollout {rollout_id!r}")
        return result

    async def complete_many(self, reports: Sequence[AttemptReport]) -> list[tuple[bool, str | None]]:
        """End many attempts in one transaction (runners report the rollouts that finished together);
        (accepted, rollout status) per report, (False, None) for an unknown rollout."""
        for report in reports:
            if report.status not in REPORTABLE_STATUSES:
                raise InvalidRequest(f"status must be one of {sorted(REPORTABLE_STATUSES)}, got {report.status!r}")

        def work(tx: StateTransaction) -> list[tuple[bool, str | None]]:
            now, results = time.time_ns(), []
            for r in reports:
                try:
                    results.append(
                        finish_attempt(tx, r.rollout_id, r.attempt_id, r.status, now, error=r.error, reward=r.reward)
                    )
                except NotFound:
                    results.append((False, None))
            return results

        results = await self.store.state_transaction(
            _telling(work, lambda results: ("finished", "queued") if any(ok for ok, _ in results) else ())
        )
        self._announce(
            [
                (r.rollout_id, r.attempt_id, outcome or "")
                for r, (ok, outcome) in zip(reports, results, strict=True)
                if ok
            ]
        )
        return results

    async def fail_runner(self, runner_id: str, error: str) -> int:
        self._lost_runners.add(runner_id)  # before the transaction: claims already queued ahead of it are failed too
        work = _telling(lambda tx: fail_runner(tx, runner_id, error, time.time_ns()), _topics_of_ended)
        changed = await self.store.state_transaction(work)
        self._announce(changed)
        return len(changed)

    async def cancel(self, rollout_ids: Sequence[str]) -> int:
        work = _telling(
            lambda tx: cancel(tx, rollout_ids, time.time_ns()), lambda count: ("finished",) if count else ()
        )
        count = await self.store.state_transaction(work)
        if count:
            self.ended_unseen()
        return count

    async def wait(
        self, rollout_ids: Sequence[str], timeout_s: float, records: str = "all"
    ) -> tuple[bool, list[dict[str, Any]], dict[str, int]]:
        """Until every rollout is final (or `timeout_s`): (all done, their records, how many are still queuing and
        running). `records`: "all", "final" (only the final ones: a poller that keeps the rest), or "none" (a
        poller that only counts: a large batch is not read whole at every poll)."""
        if records not in WAIT_RECORDS:
            raise ValueError(f"records must be one of {WAIT_RECORDS}, got {records!r}")
        deadline = time.monotonic() + min(timeout_s, 300.0)
        # A final status is never left (a failed attempt that is retried goes from running back to queuing), so the
        # store is read once for the rollouts still unfinished; after that, the endings this collector announces
        # take them off, without a read. The store is read again only for endings it cannot name (another
        # collector's, a cancel), on the recheck timer, and before answering a poll that times out (fresh counts).
        # Re-reading it on every completion burst cost a 2,000-rollout batch's trainer ~9% of a core.
        pending: dict[str, str] = dict.fromkeys(rollout_ids, QUEUING)
        watch = _EndedWatch()
        self._ended_watches.add(watch)
        try:
            read = True
            while True:
                generation = self.finished.generation
                if read:
                    watch.clear()  # what ended before this read is in its answer
                    checking = time.monotonic()
                    pending = await self.store.state_transaction(lambda tx, ids=list(pending): unfinished(tx, ids))
                    checked_s = time.monotonic() - checking
                else:
                    watch.apply(pending)
                remaining = deadline - time.monotonic()
                if not pending or self._closing or (remaining <= 0 and read):
                    break
                if remaining <= 0:  # the counts a poller shows come from the store, not from this wait's bookkeeping
                    read = True
                    continue
                woke = await self.finished.wait(min(remaining, self.recheck_s), after=generation)
                read = not woke or watch.unseen
                if read:
                    # A read of a large batch costs the store's thread time that claims and completions wait for:
                    # reads are spaced at ten times their own cost (not past the deadline).
                    await asyncio.sleep(max(0.0, min(max(0.02, 10 * checked_s), deadline - time.monotonic())))
        finally:
            self._ended_watches.discard(watch)
        counts = {QUEUING: 0, RUNNING: 0}
        for status in pending.values():
            counts[status] += 1
        if records == "none":
            return not pending, [], counts
        wanted = rollout_ids if records == "all" else [i for i in rollout_ids if i not in pending]
        found = await self.store.state_transaction(lambda tx: get_rollouts(tx, wanted)) if wanted else []
        return not pending, found, counts

    async def rollouts(self, rollout_ids: Sequence[str]) -> list[dict[str, Any]]:
        return await self.store.state_transaction(lambda tx: get_rollouts(tx, rollout_ids))

    async def rollout(self, rollout_id: str) -> dict[str, Any]:
        return await self.store.state_transaction(lambda tx: get_rollout_detail(tx, rollout_id))

    async def list(self, status: str | None, limit: int) -> list[dict[str, Any]]:
        return await self.store.state_transaction(lambda tx: list_rollouts(tx, status, limit))

    async def page(
        self, status: str | None, order: str, after: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        return await self.store.state_transaction(lambda tx: page_rollouts(tx, status, order, after, limit))

    async def counts(self, status: str | None = None) -> dict[str, int]:
        return await self.store.state_transaction(lambda tx: status_counts(tx, status))

    async def put_resources(self, resources: dict[str, Any]) -> int:
        return await self.store.state_transaction(lambda tx: put_resources(tx, resources, time.time_ns()))

    async def resources(self, version: int | None) -> dict[str, Any]:
        return await self.store.state_transaction(lambda tx: get_resources(tx, version))
