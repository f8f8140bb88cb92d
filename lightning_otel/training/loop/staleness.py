"""Asynchronous rollouts under a staleness bound: the runners never wait for the update.

    rollouts = AsyncRollouts(run, group_size=4, max_staleness=1, stamp=lambda: {"policy_version": loop_version})
    rollouts.queue(tasks_of_step_1); rollouts.queue(tasks_of_step_2)    # work queued ahead of the trainer
    taken = rollouts.take(8, version=3)      # the first 8 complete groups whose oldest call is >= version 3 - 1

Groups (a task's `group_size` rollouts) are queued ahead of the trainer and run while it updates. `take` waits for
`n` complete groups (every rollout final, spans read and adapted), in the order they completed. A group's age is the
oldest policy version that sampled any of its calls (`agl.llm.policy_version` on the LLM spans, the weights the
replica served); its staleness is the version being trained minus that. Groups older than `max_staleness` are
dropped, counted, and their task queued again (it runs on the current weights); unfinished groups carry over to the
next step. `max_staleness=0` is not run here: the loop's synchronous step is today's behaviour, exactly.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_otel.runtime.rollout_batch import BatchResult, RolloutBatch
from lightning_otel.runtime.training_run import TrainingRun

log = logging.getLogger("lightning_otel.training")


@dataclass(slots=True)
class _Group:
    group_id: str
    task: Any
    batch: RolloutBatch  # the submission it came in (its rollout ids are this group's)
    queued_at: float
    version: int | None = None  # the oldest policy version among its calls, once read
    result: BatchResult | None = None  # read when every rollout was final


@dataclass(slots=True)
class Taken:
    """What a step trains on: the groups' rollouts read as one batch, and the pipeline's counts at that moment."""

    result: BatchResult
    staleness: dict[str, int]  # rollout id -> versions behind the trained policy
    dropped_stale: int  # groups dropped as too old since the previous take (their tasks were queued again)
    carried_over: int  # groups queued, running or complete and not taken: the next steps'
    waited_s: float  # how long the trainer waited for the groups (0 when they were complete already)


def merged(results: Sequence[BatchResult], batch_id: str) -> BatchResult:
    """Several groups' reads as one batch (what `samples_from` takes), each rollout's task kept (`tasks()`: the
    self-distillation teacher's context is filled from it)."""
    rollouts = [record for result in results for record in result.rollouts]
    enqueued = [record for result in results for record in result.batch.records]
    batch = RolloutBatch(batch_id, "train", [r["rollout_id"] for r in rollouts], enqueued)
    counted = [result.gateway_calls for result in results if result.gateway_calls is not None]
    return BatchResult(
        batch, rollouts,
        spans={k: v for result in results for k, v in result.spans.items()},
        adapted={k: v for result in results for k, v in result.adapted.items()},
        wall_s=sum(result.wall_s for result in results), wait_s=sum(result.wait_s for result in results),
        incomplete={k: v for result in results for k, v in result.incomplete.items()},
        gateway_calls=sum(counted) if counted else None,
    )  # fmt: skip


class AsyncRollouts:
    """See the module docstring. `stamp()`: what each rollout queued now records (the loop's settings and the policy
    version serving); `collect_timeout_s`: a group still unfinished that long after it was queued has its running
    rollouts cancelled (they count as cancelled, as in a synchronous step); `poll_s`: how often the queue is asked
    which rollouts are final."""

    def __init__(
        self,
        run: TrainingRun,
        *,
        group_size: int,
        max_staleness: int,
        stamp: Callable[[], dict[str, Any]],
        collect_timeout_s: float | None = None,
        poll_s: float = 0.2,
    ) -> None:
        if max_staleness < 1:
            raise ValueError(f"AsyncRollouts needs max_staleness >= 1 (0 is the synchronous step), got {max_staleness}")
        self.run, self.group_size, self.max_staleness, self.stamp = run, group_size, max_staleness, stamp
        self.collect_timeout_s, self.poll_s = collect_timeout_s, poll_s
        self._pending: dict[str, _Group] = {}  # not final yet, in queue order
        self._ready: collections.OrderedDict[str, _Group] = collections.OrderedDict()  # read, in completion order
        self._dropped = 0
        self.dropped_total = 0
        self._unclaimed_since: float | None = None  # every pending rollout still queued (no runner?) since then
        self._warned = False

    @property
    def in_flight(self) -> int:
        """Groups queued, running, or complete and not taken."""
        return len(self._pending) + len(self._ready)

    def queue(self, tasks: Sequence[Any]) -> None:
        if not tasks:
            return
        batch = self.run.submit(tasks, n=self.group_size, mode="train", metadata=self.stamp())
        by_group: dict[str, list[dict[str, Any]]] = {}
        for record in batch.records:
            by_group.setdefault(record["group_id"], []).append(record)
        now = time.monotonic()
        for index, (group_id, records) in enumerate(by_group.items()):
            sub = RolloutBatch(batch.batch_id, "train", [r["rollout_id"] for r in records], records)
            self._pending[group_id] = _Group(group_id, tasks[index], sub, now)

    def take(self, n: int, version: int) -> Taken:
        """Wait for `n` complete groups within the staleness bound (fewer when nothing else is queued)."""
        began = time.monotonic()
        while True:
            self._drop_stale(version)
            if len(self._ready) >= n or not self._pending:
                break
            self.run.check_runners()  # a dead runner is replaced; its attempts retry
            self._poll()
        groups = [self._ready.popitem(last=False)[1] for _ in range(min(n, len(self._ready)))]
        results = [group.result for group in groups if group.result is not None]
        ahead = [group for group in groups if group.version is not None and group.version > version]
        if ahead:  # one count everywhere makes this impossible: a backend serving under a count of its own
            log.error(
                "group %s was sampled by policy v%s, newer than the v%d being trained: the backend's replicas do not "
                "serve under the loop's version count", ahead[0].group_id, ahead[0].version, version,
            )  # fmt: skip
        staleness = {
            rollout_id: _behind(version, group.version) for group in groups for rollout_id in group.batch.rollout_ids
        }
        dropped, self._dropped = self._dropped, 0
        taken = merged(results, f"async-{groups[0].batch.batch_id if groups else 'none'}")
        return Taken(taken, staleness, dropped, self.in_flight, time.monotonic() - began)

    def cancel_rest(self) -> int:
        """Cancel every group not trained (the run ended): returns how many rollouts were cancelled."""
        ids = [rid for group in self._pending.values() for rid in group.batch.rollout_ids]
        self._pending.clear()
        self._ready.clear()
        return int(self.run.client.cancel(ids)) if ids else 0

    # --- internals -------------------------------------------------------------------------------------------------
    def _poll(self) -> None:
        ids = [rid for group in self._pending.values() for rid in group.batch.rollout_ids]
        # the final records only: a group leaves the poll once all of its rollouts are final
        answer = self.run.client.wait_rollouts(ids, timeout=self.poll_s, records="final")
        final_records = {record["rollout_id"]: record for record in answer["rollouts"]}
        if ids and answer["unfinished"]["queuing"] == len(ids):
            now = time.monotonic()
            self._unclaimed_since = self._unclaimed_since or now
            everything = RolloutBatch("pending", "train", ids, [])  # NoRunner past the run's timeout
            self._warned = self.run.no_runner(everything, now - self._unclaimed_since, self._warned)
        else:
            self._unclaimed_since = None
        final: list[tuple[_Group, list[dict[str, Any]]]] = []
        now = time.monotonic()
        for group_id, group in list(self._pending.items()):
            mine = [final_records[rid] for rid in group.batch.rollout_ids if rid in final_records]
            if len(mine) == len(group.batch.rollout_ids):
                final.append((group, mine))
                del self._pending[group_id]
            elif self.collect_timeout_s is not None and now - group.queued_at > self.collect_timeout_s:
                unfinished = [rid for rid in group.batch.rollout_ids if rid not in final_records]
                self.run.client.cancel(unfinished)  # final (cancelled) at the next poll
        for group, mine in final:
            group.result = self.run.read(group.batch, mine)
            group.version = _oldest_version(group.result)
            self._ready[group.group_id] = group

    def _drop_stale(self, version: int) -> None:
        stale = [group for group in self._ready.values() if _behind(version, group.version) > self.max_staleness]
        for group in stale:
            del self._ready[group.group_id]
        if stale:
            self._dropped += len(stale)
            self.dropped_total += len(stale)
            log.warning(
                "dropped %d group(s) sampled more than %d version(s) before policy v%s (their tasks run again): %s",
                len(stale), self.max_staleness, version, ", ".join(group.group_id for group in stale[:5]),
            )  # fmt: skip
            self.queue([group.task for group in stale])


def _oldest_version(result: BatchResult) -> int | None:
    """The oldest policy version on the group's calls; the version it was queued under when no call names one."""
    versions = [t.policy_version for t in result.triplets() if t.policy_version is not None]
    if versions:
        return min(versions)
    queued = [(r.get("metadata") or {}).get("policy_version") for r in result.rollouts]
    known = [int(v) for v in queued if v is not None]
    return min(known) if known else None


def _behind(version: int, oldest: int | None) -> int:
    """Versions between the sampler and the trained policy (0 when no call names its sampler: a vLLM replica; the
    version the group was queued under then stands for it, see `_oldest_version`)."""
    return max(0, version - oldest) if oldest is not None else 0


@dataclass(slots=True)
class RunnerUsage:
    """How busy the runners were: a thread samples how many rollouts run (the queue's count) every `every_s`;
    `lap()` returns the idle share since the previous lap (`rollout/runner_idle_share`): 1 - mean running /
    `capacity` (the rollouts the runners could run at once, at most a step's)."""

    client: Any
    capacity: int
    every_s: float = 0.5
    _busy: float = 0.0
    _since: float = field(default_factory=time.monotonic)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> RunnerUsage:
        self._thread = threading.Thread(target=self._sample, name="agl-runner-usage", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def lap(self) -> float:
        with self._lock:
            now = time.monotonic()
            elapsed, busy = now - self._since, self._busy
            self._since, self._busy = now, 0.0
        if elapsed <= 0 or self.capacity <= 0:
            return float("nan")
        return max(0.0, 1.0 - busy / (elapsed * self.capacity))

    def _sample(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.every_s):
            try:
                running = int(self.client.queue_stats("running").get("running", 0))  # one status's index range
            except Exception:  # a metric: a failed sample counts as none running
                running = 0
            now = time.monotonic()
            with self._lock:
                self._busy += min(running, self.capacity) * (now - last)
            last = now


def require_async_support(max_staleness: int, backend: str, serves_while_updating: bool, why_not: str) -> None:
    """Asynchronous training needs replicas that serve while the backend updates (checked before anything starts)."""
    if max_staleness and not serves_while_updating:
        raise ValueError(
            f"max_staleness={max_staleness}: the {backend} backend cannot serve the policy while it updates "
            f"({why_not}); use max_staleness=0"
        )
