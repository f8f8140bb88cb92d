"""Runs on the queue, each operation one transaction of plain SQL (SQLite and PostgreSQL alike), as the rollouts'
are (`rollout_transactions`).

A run is one training or dry run. It starts with a lease (`lease_s`) and renews it while it lives; it ends
`finished` or `failed` by its own word, or `lost` when its lease lapsed (its trainer died or was cut off). A run that
ends, either way, takes its unfinished rollouts with it (cancelled), so no runner spends time on them. Starting a run
touches no other live run: only the rollouts of runs that are no longer running (lapsed, or ended without
cancelling theirs) are cancelled then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightning_otel.collector.queue.rollout_rows import NotFound, RunRefused
from lightning_otel.collector.queue.rollout_transactions import cancel
from lightning_otel.collector.queue_schema import (
    MAX_LEASE_S,
    MIN_LEASE_S,
    QUEUING,
    RUN_ENDINGS,
    RUN_LOST,
    RUN_RUNNING,
    RUNNING,
)
from lightning_otel.collector.stores.store import StateTransaction

_RUN_FIELDS = ("run_id", "state", "lease_s", "heartbeat_ns", "created_ns", "end_ns")


class RunNotFound(NotFound):
    """No such run (HTTP 404)."""


def _run_json(row: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(_RUN_FIELDS, row, strict=True))


def get_run(tx: StateTransaction, run_id: str) -> dict[str, Any] | None:
    rows = tx.execute(f"SELECT {', '.join(_RUN_FIELDS)} FROM agl_runs WHERE run_id = ?", (run_id,))
    return _run_json(rows[0]) if rows else None


def list_runs(tx: StateTransaction, state: str | None, limit: int) -> list[dict[str, Any]]:
    columns = ", ".join(_RUN_FIELDS)
    if state is None:
        rows = tx.execute(f"SELECT {columns} FROM agl_runs ORDER BY created_ns DESC LIMIT ?", (limit,))
    else:
        rows = tx.execute(
            f"SELECT {columns} FROM agl_runs WHERE state = ? ORDER BY created_ns DESC LIMIT ?", (state, limit)
        )
    return [_run_json(row) for row in rows]


def live_runs(tx: StateTransaction) -> int:
    return tx.execute("SELECT COUNT(*) FROM agl_runs WHERE state = ?", (RUN_RUNNING,))[0][0]


def start_run(
    tx: StateTransaction, run_id: str, lease_s: float, now: int, healthy_since_ns: int
) -> tuple[dict[str, Any], int]:
    """Start (or restart, same id) a run holding a lease of `lease_s`; first the runs whose lease lapsed are lost,
    and the unfinished rollouts of every run not running are cancelled. A run started again (a trainer restarted
    from its checkpoint) owns only what it enqueues from now: what its earlier trainer left unfinished is cancelled,
    not run for a trainer that will never read it. Returns (the run, how many were cancelled)."""
    if not MIN_LEASE_S <= lease_s <= MAX_LEASE_S:
        raise RunRefused(f"lease_s must be between {MIN_LEASE_S:g} and {MAX_LEASE_S:g} s, got {lease_s!r}")
    lapsed = expire_runs(tx, now, healthy_since_ns)
    found = get_run(tx, run_id)
    if found is None:
        tx.execute(
            "INSERT INTO agl_runs (run_id, state, lease_s, heartbeat_ns, created_ns) VALUES (?, ?, ?, ?, ?)",
            (run_id, RUN_RUNNING, lease_s, now, now),
        )
    else:
        tx.execute(
            "UPDATE agl_runs SET state = ?, lease_s = ?, heartbeat_ns = ?, end_ns = NULL WHERE run_id = ?",
            (RUN_RUNNING, lease_s, now, run_id),
        )
        restarted = cancel_run_rollouts(tx, run_id, now, "its run was started again (a restarted trainer)")
        lapsed = [*lapsed, (run_id, restarted)]
    orphans = tx.execute(
        "SELECT DISTINCT r.run_id FROM agl_rollouts r LEFT JOIN agl_runs u ON u.run_id = r.run_id "
        "WHERE r.status IN (?, ?) AND r.run_id IS NOT NULL AND (u.state IS NULL OR u.state <> ?)",
        (QUEUING, RUNNING, RUN_RUNNING),
    )
    cancelled = sum(cancel_run_rollouts(tx, other, now, "its run is no longer running") for (other,) in orphans)
    run = get_run(tx, run_id)
    assert run is not None
    return run, cancelled + sum(count for _, count in lapsed)


def renew_run(tx: StateTransaction, run_id: str, now: int) -> dict[str, Any]:
    """Renew a running run's lease; a run that ended or was lost stays so (its rollouts are gone): the caller
    learns it from the state returned."""
    tx.execute("UPDATE agl_runs SET heartbeat_ns = ? WHERE run_id = ? AND state = ?", (now, run_id, RUN_RUNNING))
    run = get_run(tx, run_id)
    if run is None:
        raise RunNotFound(f"no run {run_id!r}")
    return run


def end_run(tx: StateTransaction, run_id: str, state: str, now: int) -> tuple[dict[str, Any], int]:
    """A run's own end (`finished` or `failed`); its unfinished rollouts are cancelled. Returns (run, cancelled)."""
    if state not in RUN_ENDINGS:
        raise RunRefused(f"a run ends {sorted(RUN_ENDINGS)}, got {state!r}")
    if get_run(tx, run_id) is None:
        raise RunNotFound(f"no run {run_id!r}")
    tx.execute(
        "UPDATE agl_runs SET state = ?, end_ns = ? WHERE run_id = ? AND state = ?", (state, now, run_id, RUN_RUNNING)
    )
    cancelled = cancel_run_rollouts(tx, run_id, now, f"its run ended ({state})")
    run = get_run(tx, run_id)
    assert run is not None
    return run, cancelled


def expire_runs(tx: StateTransaction, now: int, healthy_since_ns: int) -> list[tuple[str, int]]:
    """Runs whose lease lapsed become `lost` and their unfinished rollouts are cancelled; returns (run, cancelled)
    for each. A lease counts only the time this collector could serve renewals (`healthy_since_ns`: since it started
    or its store came back), so an outage of the collector or its store loses no run."""
    rows = tx.execute(
        "SELECT run_id FROM agl_runs WHERE state = ? AND heartbeat_ns + lease_s * 1e9 < ? AND ? + lease_s * 1e9 < ?",
        (RUN_RUNNING, now, healthy_since_ns, now),
    )
    lapsed = []
    for (run_id,) in rows:
        tx.execute("UPDATE agl_runs SET state = ?, end_ns = ? WHERE run_id = ?", (RUN_LOST, now, run_id))
        cancelled = cancel_run_rollouts(tx, run_id, now, "its run's lease lapsed (its trainer is gone)")
        lapsed.append((run_id, cancelled))
    return lapsed


def cancel_run_rollouts(tx: StateTransaction, run_id: str, now: int, why: str) -> int:
    """Cancel a run's queued and running rollouts (their running attempts too); returns how many."""
    rows = tx.execute(
        "SELECT rollout_id FROM agl_rollouts WHERE run_id = ? AND status IN (?, ?)", (run_id, QUEUING, RUNNING)
    )
    return cancel(tx, [row[0] for row in rows], now, why)


__all__ = [
    "RunNotFound",
    "RunRefused",
    "cancel_run_rollouts",
    "end_run",
    "expire_runs",
    "get_run",
    "list_runs",
    "live_runs",
    "renew_run",
    "start_run",
]
