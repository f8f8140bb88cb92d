"""The rollout queue's operations, each one transaction of plain SQL with `?` placeholders, so SQLite and PostgreSQL
share them (PostgreSQL adds row locks where SQLite's `BEGIN IMMEDIATE` already serializes writers): enqueue, claim,
heartbeat, an attempt's end (retried or final), expiry, a dead runner's attempts, cancel (the reads and the
resources: `queue_reads`).
The rules of a rollout's life are here, in SQL; waiting for them, and telling other collectors, is `rollout_state`'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from lightning_otel.collector.queue.queue_reads import get_rollouts, latest_resources_version
from lightning_otel.collector.queue.rollout_rows import (
    InvalidRequest,
    NotFound,
    RunRefused,
    chunks,
)
from lightning_otel.collector.queue_schema import (
    CANCELLED,
    FAILED,
    FINAL_STATUSES,
    MODES,
    QUEUING,
    RUN_RUNNING,
    RUNNING,
    SUCCEEDED,
    TIMEOUT,
)
from lightning_otel.collector.stores.store import StateTransaction


@dataclass(frozen=True, slots=True)
class AttemptReport:
    """A runner's word on one attempt."""

    rollout_id: str
    attempt_id: str
    status: str
    error: str | None = None
    reward: float | None = None
    cause: str | None = None  # "infrastructure:..." or "policy:..." (the runner's reading of the attempt)


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
    run_id: str | None = None  # the run it belongs to (a running one); None: no run's

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
        if spec.run_id is not None and (not isinstance(spec.run_id, str) or not spec.run_id):
            raise InvalidRequest(f"run_id must be a non-empty string, got {spec.run_id!r}")
        return spec


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
                spec.run_id,
            )
        )
    if len({row[0] for row in rows}) != len(rows):
        raise InvalidRequest("rollout_id repeated within one request")
    _check_runs_running(tx, {spec.run_id for spec in specs if spec.run_id is not None})
    placeholders = ", ".join("?" * 15)
    existing = _existing_ids(tx, [row[0] for row in rows])
    if existing and not existing_ok:
        raise InvalidRequest(f"rollout ids already exist: {sorted(existing)[:5]}")
    ids = [row[0] for row in rows]
    rows = [row for row in rows if row[0] not in existing]
    if rows:
        tx.executemany(
            "INSERT INTO agl_rollouts (rollout_id, position, task_id, group_id, mode, input, metadata, status, "
            "max_attempts, timeout_s, attempts, resources_version, created_ns, updated_ns, run_id) "
            f"VALUES ({placeholders})",
            rows,
        )
    return get_rollouts(tx, ids)


def _check_runs_running(tx: StateTransaction, run_ids: set[str]) -> None:
    """Rollouts are queued only for a running run (a run that ended or was lost has no one to read them)."""
    for run_id in sorted(run_ids):
        found = tx.execute("SELECT state FROM agl_runs WHERE run_id = ?", (run_id,))
        if not found or found[0][0] != RUN_RUNNING:
            said = "unknown to this collector" if not found else found[0][0]
            raise RunRefused(
                f"run {run_id!r} is {said}: rollouts are queued only for a running run (start it first: POST /v1/runs)"
            )


def _existing_ids(tx: StateTransaction, rollout_ids: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for chunk in chunks(rollout_ids):
        marks = ", ".join("?" * len(chunk))
        found.update(
            r[0] for r in tx.execute(f"SELECT rollout_id FROM agl_rollouts WHERE rollout_id IN ({marks})", chunk)
        )
    return found


def claim(
    tx: StateTransaction, runner_id: str, limit: int, now: int, run_id: str | None = None
) -> list[dict[str, Any]]:
    """Start an attempt on up to `limit` queued rollouts of one run, oldest first: the run `run_id` (a runner
    serving it), else the run of the oldest rollout claimable (a running run's, or one queued outside any run)."""
    if run_id is None:
        oldest = tx.execute(
            "SELECT r.run_id FROM agl_rollouts r LEFT JOIN agl_runs u ON u.run_id = r.run_id WHERE r.status = ? "
            "AND (r.run_id IS NULL OR u.state = ?) ORDER BY r.position LIMIT 1",
            (QUEUING, RUN_RUNNING),
        )
        if not oldest:
            return []
        run_id = oldest[0][0]
    same_run = "run_id IS NULL" if run_id is None else "run_id = ?"
    rows = tx.execute(
        f"SELECT rollout_id, attempts, resources_version FROM agl_rollouts WHERE status = ? AND {same_run} "
        f"ORDER BY position LIMIT ?{tx.skip_locked}",
        (QUEUING, limit) if run_id is None else (QUEUING, run_id, limit),
    )
    if not rows:
        return []
    latest = latest_resources_version(tx, run_id)
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
    cause: str | None = None,
) -> tuple[bool, str | None]:
    """End a running attempt; returns (accepted, the rollout's status). Only the first ending of an attempt counts:
    a late report from a runner whose attempt already timed out is not accepted. The rollout keeps its latest
    attempt's error and cause."""
    won = tx.execute(
        "UPDATE agl_attempts SET status = ?, end_ns = ?, error = ?, reward = ?, cause = ? "
        "WHERE rollout_id = ? AND attempt_id = ? AND status = ? RETURNING number",
        (status, now, error, reward, cause, rollout_id, attempt_id, RUNNING),
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
        "UPDATE agl_rollouts SET status = ?, updated_ns = ?, end_ns = ?, reward = ?, error = ?, cause = ? "
        "WHERE rollout_id = ?",
        (outcome, now, now if outcome in FINAL_STATUSES else None, reward, error, cause, rollout_id),
    )
    return True, outcome


def expire(
    tx: StateTransaction, now: int, heartbeat_timeout_ns: int, healthy_since_ns: int = 0
) -> list[tuple[str, str, str]]:
    """Time out running attempts that went silent or ran past their rollout's timeout; returns what changed. Silence
    counts only once this collector could hear heartbeats for a whole timeout (`healthy_since_ns`: since it started,
    its store came back or it woke from a pause), so an outage or a pause times out no attempt."""
    silent_before = now - heartbeat_timeout_ns if healthy_since_ns <= now - heartbeat_timeout_ns else -1
    rows = tx.execute(
        "SELECT a.rollout_id, a.attempt_id, a.heartbeat_ns < ? FROM agl_attempts a "
        "JOIN agl_rollouts r ON r.rollout_id = a.rollout_id WHERE a.status = ? "
        "AND (a.heartbeat_ns < ? OR (r.timeout_s IS NOT NULL AND a.start_ns + r.timeout_s * 1e9 < ?))",
        (silent_before, RUNNING, silent_before, now),
    )
    changed = []
    for rollout_id, attempt_id, silent in rows:
        reason = "no heartbeat from the runner" if silent else "rollout ran past its timeout_s"
        cause = "infrastructure:no_heartbeat" if silent else "infrastructure:rollout_timeout"
        accepted, outcome = finish_attempt(tx, rollout_id, attempt_id, TIMEOUT, now, error=reason, cause=cause)
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
        accepted, outcome = finish_attempt(
            tx, rollout_id, attempt_id, FAILED, now, error=error, cause="infrastructure:runner_lost"
        )
        if accepted and outcome is not None:
            changed.append((rollout_id, attempt_id, outcome))
    return changed


def cancel(tx: StateTransaction, rollout_ids: Sequence[str], now: int, why: str | None = None) -> int:
    """Cancel the rollouts not final yet (their running attempts too); `why`: the error they keep
    ("cancelled: <why>"; without one a rollout keeps its error). Returns how many were cancelled."""
    said = f"cancelled: {why}" if why else None
    cancelled = 0
    for chunk in chunks(rollout_ids):
        marks = ", ".join("?" * len(chunk))
        tx.execute(
            f"UPDATE agl_attempts SET status = ?, end_ns = ?, error = ? WHERE status = ? AND rollout_id IN ({marks})",
            (CANCELLED, now, said or "cancelled", RUNNING, *chunk),
        )
        cancelled += len(
            tx.execute(
                f"UPDATE agl_rollouts SET status = ?, updated_ns = ?, end_ns = ?, error = COALESCE(?, error) "
                f"WHERE status IN (?, ?) AND rollout_id IN ({marks}) RETURNING rollout_id",
                (CANCELLED, now, now, said, QUEUING, RUNNING, *chunk),
            )
        )
    return cancelled
