"""Rollout state: the training queue the trainer fills and runners drain, kept in the collector's store.

A rollout is one run of the agent on one task. It waits `queuing` until a runner claims it, which starts an
attempt (`at-1`, `at-2`, ...) and makes it `running`. The runner reports the attempt `succeeded` or `failed`; an
attempt whose runner stops sending heartbeats (a span of the attempt arriving counts as one) or that runs past the
rollout's `timeout_s` becomes `timeout`. A failed or timed-out attempt puts the rollout back in the queue until
`max_attempts` attempts were made; then the rollout ends `failed` or `timeout`. `cancelled` ends it from outside.
Resources (e.g. the `main_llm` endpoint) are versioned snapshots; each attempt records the version it ran with.
A run (a training, a dry run) holds a lease on the queue; its rollouts and resources are its own, and the watchdog
ends a run whose lease lapsed, with its rollouts (`run_transactions`).

Every operation is one transaction of plain SQL (`rollout_transactions`, SQLite and PostgreSQL alike); this module is
the service around them. Waiting is event-driven in this process (enqueue, completion and expiry wake the waiters),
with a slow re-check for changes made by another collector sharing the same PostgreSQL store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from lightning_otel.collector.queue.queue_reads import (
    get_resources,
    get_rollout_detail,
    get_rollouts,
    list_rollouts,
    page_rollouts,
    put_resources,
    status_counts,
    unfinished,
)
from lightning_otel.collector.queue.rollout_rows import InvalidRequest, NotFound
from lightning_otel.collector.queue.rollout_transactions import (
    AttemptReport,
    RolloutSpec,
    cancel,
    claim,
    enqueue,
    expire,
    fail_runner,
    finish_attempt,
    heartbeat,
)
from lightning_otel.collector.queue.run_transactions import (
    end_run,
    expire_runs,
    get_run,
    list_runs,
    live_runs,
    renew_run,
    start_run,
)
from lightning_otel.collector.queue_schema import FINAL_STATUSES, QUEUING, REPORTABLE_STATUSES, RUNNING
from lightning_otel.collector.stores.change_signal import ChangeSignal
from lightning_otel.collector.stores.span_record import SpanRecord
from lightning_otel.collector.stores.store import SpanStore, StateTransaction

log = logging.getLogger("lightning_otel.collector.rollouts")
# What a wait returns besides the counts: every record, the final ones only, or none.
WAIT_RECORDS = ("all", "final", "none")

__all__ = ["WAIT_RECORDS", "AttemptReport", "InvalidRequest", "NotFound", "RolloutSpec", "RolloutState"]


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


def _topics_of_cancelled(result: tuple[dict[str, Any], int]) -> tuple[str, ...]:
    """A run's start or end: (the run, how many rollouts it cancelled) -> what the other collectors are told."""
    return ("finished",) if result[1] else ()


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
        stall_s: float = 5.0,
    ) -> None:
        self.store = store
        self.heartbeat_timeout_s = heartbeat_timeout_s
        # A watchdog tick this much later than due means this process did not run (a paused VM, a suspended laptop,
        # a stopped process): it could serve no renewal meanwhile, so leases count from its waking, as after an outage.
        self.stall_s = stall_s
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
        # Since when this collector could serve a run's renewals (it started, or its store came back): a lease
        # counts from then at the earliest, so an outage of the collector or its store loses no run.
        self._healthy_since_ns = time.time_ns()
        self._store_failing = False

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
            due = time.time() + interval  # wall time: a paused VM's monotonic clock may not count the pause
            await asyncio.sleep(interval)
            if (late := time.time() - due) > self.stall_s:
                self._healthy_since_ns = time.time_ns()
                log.warning("rollout watchdog: this collector did not run for %.0f s (a paused machine or process?); "
                            "runs' leases count from now", late)  # fmt: skip
            try:
                await self.check_expired()
            except Exception as exc:
                if not self._store_failing:  # one line per outage, not a traceback per second
                    log.warning("rollout watchdog: checking attempts failed (%s); trying again", exc)
                self._store_failing = True
                continue
            if self._store_failing:
                self._store_failing = False
                self._healthy_since_ns = time.time_ns()
                log.warning("rollout watchdog: the store answers again")

    async def check_expired(self) -> list[tuple[str, str, str]]:
        beats, self._span_heartbeats = self._span_heartbeats, {}
        timeout_ns = int(self.heartbeat_timeout_s * 1e9)

        def work(tx: StateTransaction) -> tuple[list[tuple[str, str, str]], list[tuple[str, int]]]:
            if beats:
                tx.executemany(
                    "UPDATE agl_attempts SET heartbeat_ns = ? WHERE rollout_id = ? AND attempt_id = ? AND status = ? "
                    "AND heartbeat_ns < ?",
                    [(ns, rollout_id, attempt_id, RUNNING, ns) for (rollout_id, attempt_id), ns in beats.items()],
                )
            now = time.time_ns()
            lapsed = expire_runs(tx, now, self._healthy_since_ns)
            return expire(tx, now, timeout_ns, self._healthy_since_ns), lapsed

        def topics(result: tuple[list[tuple[str, str, str]], list[tuple[str, int]]]) -> tuple[str, ...]:
            changed, lapsed = result
            ended = _topics_of_ended(changed)
            return ended if ended or not lapsed else ("finished",)

        changed, lapsed = await self.store.state_transaction(_telling(work, topics))
        self._announce(changed)
        for run_id, cancelled in lapsed:
            log.warning("run %s lost: its lease lapsed (its trainer is gone); %d rollouts cancelled", run_id,
                        cancelled)  # fmt: skip
        if lapsed:
            self.ended_unseen()
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

    async def claim(
        self, runner_id: str, limit: int, wait_s: float, *, run_id: str | None = None,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> list[dict[str, Any]]:  # fmt: skip
        """Up to `limit` attempts of one run (`run_id`, or the oldest claimable rollout's), waiting up to `wait_s`;
        nothing once `gone()` says the claimer left (its connection closed while the claim waited: a runner that
        stopped must not take rollouts it will never run)."""
        deadline = time.monotonic() + min(wait_s, 300.0)
        while True:
            generation = self.queued.generation
            if runner_id in self._lost_runners or (gone is not None and await gone()):
                return []
            claimed = await self.store.state_transaction(lambda tx: claim(tx, runner_id, limit, time.time_ns(), run_id))
            remaining = deadline - time.monotonic()
            if claimed or remaining <= 0 or self._closing:
                return claimed
            await self.queued.wait(min(remaining, self.recheck_s), after=generation)

    async def heartbeat(self, attempts: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        return await self.store.state_transaction(lambda tx: heartbeat(tx, attempts, time.time_ns()))

    async def complete(
        self,
        rollout_id: str,
        attempt_id: str,
        status: str,
        *,
        error: str | None = None,
        reward: float | None = None,
        cause: str | None = None,
    ) -> tuple[bool, str | None]:
        (result,) = await self.complete_many([AttemptReport(rollout_id, attempt_id, status, error, reward, cause)])
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
                    ended = finish_attempt(
                        tx, r.rollout_id, r.attempt_id, r.status, now, error=r.error, reward=r.reward, cause=r.cause
                    )
                    results.append(ended)
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

    async def put_resources(self, resources: dict[str, Any], run_id: str | None = None) -> int:
        return await self.store.state_transaction(lambda tx: put_resources(tx, resources, time.time_ns(), run_id))

    async def resources(self, version: int | None, run_id: str | None = None) -> dict[str, Any]:
        return await self.store.state_transaction(lambda tx: get_resources(tx, version, run_id))

    # --- runs ----------------------------------------------------------------------------------------------------
    async def start_run(self, run_id: str, lease_s: float) -> tuple[dict[str, Any], int]:
        """Start a run with a lease; the unfinished rollouts of runs no longer running are cancelled (how many)."""
        work = _telling(
            lambda tx: start_run(tx, run_id, lease_s, time.time_ns(), self._healthy_since_ns), _topics_of_cancelled
        )
        run, cancelled = await self.store.state_transaction(work)
        if cancelled:
            log.warning("run %s started: %d unfinished rollouts cancelled (of runs no longer running, or its own "
                        "earlier trainer's)", run_id, cancelled)  # fmt: skip
            self.ended_unseen()
        return run, cancelled

    async def renew_run(self, run_id: str) -> dict[str, Any]:
        return await self.store.state_transaction(lambda tx: renew_run(tx, run_id, time.time_ns()))

    async def end_run(self, run_id: str, state: str) -> tuple[dict[str, Any], int]:
        work = _telling(lambda tx: end_run(tx, run_id, state, time.time_ns()), _topics_of_cancelled)
        run, cancelled = await self.store.state_transaction(work)
        if cancelled:
            self.ended_unseen()
        return run, cancelled

    async def run(self, run_id: str) -> dict[str, Any] | None:
        return await self.store.state_transaction(lambda tx: get_run(tx, run_id))

    async def runs(self, state: str | None, limit: int) -> list[dict[str, Any]]:
        return await self.store.state_transaction(lambda tx: list_runs(tx, state, limit))

    async def run_state(self, run_id: str | None) -> tuple[str | None, int]:
        """(the state of run `run_id`, None when unknown or not asked; how many runs are live), one read."""

        def read(tx: StateTransaction) -> tuple[str | None, int]:
            run = get_run(tx, run_id) if run_id is not None else None
            return (run["state"] if run else None), live_runs(tx)

        return await self.store.state_transaction(read)
