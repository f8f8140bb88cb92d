"""The rollout queue's reads and the resources' versions, each one transaction of plain SQL (`?` placeholders, as the
queue's writes in `rollout_transactions`): rollouts by id, one rollout with its attempts, the unfinished ones, lists
and pages, counts by status; resources put and read by version, per run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from lightning_otel.collector.queue.rollout_rows import (
    ATTEMPT_FIELDS,
    ROLLOUT_COLUMNS_OF_R,
    InvalidRequest,
    NotFound,
    attempt_json,
    chunks,
    rollout_json,
)
from lightning_otel.collector.queue_schema import CANCELLED, FAILED, QUEUING, RUNNING, SUCCEEDED, TIMEOUT
from lightning_otel.collector.stores.store import StateTransaction


def get_rollouts(tx: StateTransaction, rollout_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Records in the order asked; unknown ids are left out."""
    found: dict[str, dict[str, Any]] = {}
    for chunk in chunks(rollout_ids):
        marks = ", ".join("?" * len(chunk))
        rows = tx.execute(
            f"SELECT {ROLLOUT_COLUMNS_OF_R}, a.runner_id FROM agl_rollouts r LEFT JOIN agl_attempts a "
            f"ON a.rollout_id = r.rollout_id AND a.attempt_id = r.attempt_id WHERE r.rollout_id IN ({marks})",
            chunk,
        )
        for *row, runner_id in rows:
            found[row[0]] = {**rollout_json(row), "runner_id": runner_id}  # the runner of its latest attempt
    return [found[rollout_id] for rollout_id in rollout_ids if rollout_id in found]


def get_rollout_detail(tx: StateTransaction, rollout_id: str) -> dict[str, Any]:
    records = get_rollouts(tx, [rollout_id])
    if not records:
        raise NotFound(f"no rollout {rollout_id!r}")
    rows = tx.execute(
        f"SELECT {', '.join(ATTEMPT_FIELDS)} FROM agl_attempts WHERE rollout_id = ? ORDER BY number",
        (rollout_id,),
    )
    return {**records[0], "attempt_list": [attempt_json(row) for row in rows]}


def unfinished(tx: StateTransaction, rollout_ids: Sequence[str]) -> dict[str, str]:
    """Those of `rollout_ids` still queued or running, with that status."""
    left: dict[str, str] = {}
    for chunk in chunks(rollout_ids):
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


def put_resources(tx: StateTransaction, resources: dict[str, Any], now: int, run_id: str | None = None) -> int:
    """A new version of a run's resources (`run_id` None: published outside any run); versions count across runs.
    Publishers run one at a time: two runs publishing at once on PostgreSQL would both take MAX + 1."""
    tx.serialize("agl_resources")
    rows = tx.execute(
        "INSERT INTO agl_resources (version, resources, created_ns, run_id) "
        "SELECT COALESCE(MAX(version), 0) + 1, ?, ?, ? FROM agl_resources RETURNING version",
        (orjson.dumps(resources).decode(), now, run_id),
    )
    return rows[0][0]


def latest_resources_version(tx: StateTransaction, run_id: str | None) -> int | None:
    """A run's latest resources version; a run that published none reads those published outside any run."""
    if run_id is not None:
        found = tx.execute("SELECT MAX(version) FROM agl_resources WHERE run_id = ?", (run_id,))[0][0]
        if found is not None:
            return found
    return tx.execute("SELECT MAX(version) FROM agl_resources WHERE run_id IS NULL")[0][0]


def get_resources(tx: StateTransaction, version: int | None, run_id: str | None = None) -> dict[str, Any]:
    """One version; or (`version` None) the latest of `run_id` (`latest_resources_version`), or without a run the
    newest on the collector, whichever run published it (what a person or a service outside any run looks at)."""
    if version is None:
        if run_id is None:
            version = tx.execute("SELECT MAX(version) FROM agl_resources")[0][0]
        else:
            version = latest_resources_version(tx, run_id)
        if version is None:
            raise NotFound("no resources yet" if run_id is None else f"no resources yet for run {run_id!r}")
    rows = tx.execute("SELECT version, resources, created_ns, run_id FROM agl_resources WHERE version = ?", (version,))
    if not rows:
        raise NotFound(f"no resources version {version}")
    version, resources, created_ns, owner = rows[0]
    return {"version": version, "resources": orjson.loads(resources), "created_ns": created_ns, "run_id": owner}
