"""`TrainingRun`: what a training algorithm (the loop, Baseline, APO, yours) drives: the queue, the store's spans, the
adapter and the resources of one training.

An algorithm gets one from the Trainer and drives it in batches (`submit`, `collect`, `update_resources`: the
example is `algorithm`'s docstring).

Rollouts that failed, timed out or were cancelled are counted in `BatchResult.metrics()` and excluded from the samples.

A succeeded rollout's spans are read when they are complete: every span's parent is in the store (an agent service
exporting on its own schedule sends its spans seconds after it answered). `collect` waits for that, event-driven on
the collector, at most `span_wait_s`; a rollout still incomplete then is adapted from what arrived, counted in
`metrics()["incomplete_rollouts"]` and logged.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lightning_otel.adapters.triplets import AdaptedRollout, TraceToTriplet
from lightning_otel.agent_api.policy_address import write_policy_address
from lightning_otel.agent_api.resources import resources_to_json
from lightning_otel.collector.client import DEFAULT_RETRY_FOR_S, Client
from lightning_otel.collector.queue_schema import FINAL_STATUSES, MAX_LEASE_S, MIN_LEASE_S
from lightning_otel.flat_span import Span
from lightning_otel.runtime.early_reads import EarlyReads
from lightning_otel.runtime.rollout_batch import BatchResult, RolloutBatch
from lightning_otel.runtime.run_lease import RunLease

log = logging.getLogger("lightning_otel.trainer")


class NoRunner(RuntimeError):
    """No runner claimed any rollout of a batch within `no_runner_timeout_s`: nothing runs the agent."""


def _task_id(task: Any, fallback: str) -> str:
    if isinstance(task, dict):
        for key in ("task_id", "id"):
            if task.get(key) is not None:
                return str(task[key])
    return fallback


def new_run_id() -> str:
    return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


@dataclass(frozen=True, slots=True)
class RunSettings:
    """A training run's settings, fixed before it starts. `max_attempts` per rollout and `rollout_timeout_s` per
    attempt (the queue's); `span_wait_s`: how long a read waits for spans other processes export late; a batch none
    of whose rollouts is claimed is said after `no_runner_warning_s` and is an error (`NoRunner`) after
    `no_runner_timeout_s` (runners started elsewhere may be missing, or pointed at another collector);
    `policy_notify_file`: where the policy's address is written on each publish; `runner_slots`: how many rollouts
    the runners can run at once (the Trainer's runners x their concurrency; None: unknown, runners started
    elsewhere), against which the runners' idle share is measured; `lease_s`: the run's lease on the collector
    (renewed every sixth of it; a trainer silent that long is gone: its run ends, its rollouts are cancelled and its
    runners stop); `collector_retry_s`: how long the trainer rides out an unreachable or unavailable collector
    (retrying with backoff, a line when it starts and one when it recovers) before it fails."""

    run_id: str | None = None  # None: a new one (`new_run_id()`) for each run these settings start
    max_attempts: int = 3
    rollout_timeout_s: float | None = None
    span_wait_s: float = 30.0
    no_runner_warning_s: float = 10.0
    no_runner_timeout_s: float | None = None
    policy_notify_file: Path | None = None
    runner_slots: int | None = None
    lease_s: float = 60.0
    collector_retry_s: float = DEFAULT_RETRY_FOR_S

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.span_wait_s < 0:
            raise ValueError(f"span_wait_s must be >= 0, got {self.span_wait_s}")
        if not MIN_LEASE_S <= self.lease_s <= MAX_LEASE_S:  # the collector's bounds, said before a run starts
            raise ValueError(f"lease_s must be between {MIN_LEASE_S:g} and {MAX_LEASE_S:g} s, got {self.lease_s}")


class TrainingRun:
    """What an algorithm drives: the queue, the store's spans, the adapter and the resources of one training.

    Every rollout it queues records its run, step, batch and the adapter's whole configuration in its metadata (and
    whatever the algorithm adds: the loop's settings and the policy version serving), so the collector's rollout
    view (/ui) groups the rollouts and rebuilds exactly the trainer's adapter to explain them.

    The run is the collector's too (`start`, `finish`): it holds a lease while this training lives, its rollouts and
    resources are its own, and other trainings or dry runs on the same collector neither see nor touch them."""

    def __init__(
        self,
        client: Client,
        adapter: TraceToTriplet,
        settings: RunSettings | None = None,
        *,
        on_progress: Callable[[RolloutBatch, int, int], None] | None = None,
        check_runners: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.adapter = adapter
        settings = settings or RunSettings()
        self.settings = settings if settings.run_id else replace(settings, run_id=new_run_id())
        self.on_progress = on_progress
        self.check_runners = check_runners or (lambda: None)
        self.lease = RunLease(client, self.run_id, self.settings.lease_s)
        self._steps: dict[str, int] = {}
        self._batches = 0
        self._span_sources: list[Callable[[], bool]] = []
        self._call_counters: list[Callable[[list[tuple[str, str]]], int]] = []

    @property
    def run_id(self) -> str:
        return str(self.settings.run_id)

    def add_span_source(self, flush: Callable[[], bool]) -> None:
        """Spans this process makes for the rollouts (the policy gateway's): `flush` must put every one of them in the
        store; `collect` calls it after the rollouts finished and before reading their spans, so a rollout is never
        read without them (runners flush their own before reporting)."""
        self._span_sources.append(flush)

    def _flush_span_sources(self, *, warn: bool = True) -> bool:
        """Flush every span source; False when one did not flush in time (said unless `warn=False`)."""
        flushed = True
        for flush in self._span_sources:
            if not flush():  # read anyway: what is stored is adapted, what is missing is counted
                flushed = False
                if warn:
                    log.warning("a span source did not flush within its timeout: this batch may be read without its "
                                "spans")  # fmt: skip
        return flushed

    def add_call_counter(self, served: Callable[[list[tuple[str, str]]], int]) -> None:
        """How many LLM calls a gateway served for given (rollout id, attempt id)s: `collect` reports it beside the
        samples (`metrics()["gateway_calls"]`), so calls served but never trained are visible."""
        self._call_counters.append(served)

    def submit(
        self,
        tasks: Sequence[Any],
        *,
        n: int = 1,
        mode: str = "train",
        task_ids: Sequence[str] | None = None,
        resources_version: int | None = None,
        metadata: dict[str, Any] | None = None,
        same_step: bool = False,
    ) -> RolloutBatch:
        """Queue `n` rollouts of every task; the `n` rollouts of one task share a group id (GRPO's group).
        `resources_version`: the rollouts run with that version of the resources (default: the latest when claimed),
        so candidates evaluated side by side do not mix; `metadata`: more of it on every rollout (a `note`, a label
        the rollout view shows for the batch); `same_step`: more rollouts of the last step (refilled groups), under
        its number in the rollout view."""
        if n < 1:
            raise ValueError("n must be >= 1")
        self._ensure_started()
        self._batches += 1
        self._steps[mode] = step = self._steps.get(mode, 0) + (0 if same_step else 1)  # a refill: the same step
        batch_id = f"b{self._batches}-{uuid.uuid4().hex[:6]}"
        rollout_metadata = {
            "run_id": self.run_id,
            "step": step,
            "batch_id": batch_id,
            "adapter": self.adapter.config(),
            **(metadata or {}),
        }
        specs = []
        for index, task in enumerate(tasks):
            task_id = task_ids[index] if task_ids is not None else _task_id(task, f"{batch_id}-t{index}")
            for _ in range(n):
                specs.append(
                    {
                        "input": task,
                        "task_id": task_id,
                        "group_id": f"{batch_id}/{task_id}",
                        "mode": mode,
                        "run_id": self.run_id,
                        "max_attempts": self.settings.max_attempts,
                        "timeout_s": self.settings.rollout_timeout_s,
                        "metadata": rollout_metadata,
                        **({"resources_version": resources_version} if resources_version is not None else {}),
                    }
                )
        records = self.client.enqueue(specs) if specs else []
        return RolloutBatch(batch_id, mode, [record["rollout_id"] for record in records], records)

    def wait(
        self,
        batch: RolloutBatch,
        timeout: float | None = None,
        *,
        on_final: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Until every rollout of the batch is final (or `timeout`); the server wakes us on each completion burst.
        Without `on_final`, polls only count the batch (a batch of thousands is not read whole every second). With
        it, each poll (every second) asks for the rollouts not yet final and hands those that became final to
        `on_final`, so work on them starts while the rest run. The batch's records are read once, at the end."""
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        warned = False
        ids, total = batch.rollout_ids, len(batch.rollout_ids)
        if not ids:
            return []
        pending = list(ids)
        while True:
            self.check_runners()
            self.lease.check()
            step = 1.0 if self.on_progress or on_final else 30.0
            if deadline is not None:
                step = max(0.0, min(step, deadline - time.monotonic()))
            if on_final is None:
                answer = self.client.wait_rollouts(ids, timeout=step, records="none")
            else:  # the final ones come back once each: what is asked shrinks as the batch finishes
                answer = self.client.wait_rollouts(pending, timeout=step, records="final")
                if answer["rollouts"]:
                    finished = {record["rollout_id"] for record in answer["rollouts"]}
                    pending = [rollout_id for rollout_id in pending if rollout_id not in finished]
                    on_final(answer["rollouts"])
            left = answer["unfinished"]
            if self.on_progress is not None:
                self.on_progress(batch, total - left["queuing"] - left["running"], total)
            if answer["done"] or (deadline is not None and time.monotonic() >= deadline):
                break
            if left["queuing"] == total:
                warned = self.no_runner(batch, time.monotonic() - started, warned)
        records = self.client.wait_rollouts(ids, timeout=0)["rollouts"]
        return records

    def no_runner(self, batch: RolloutBatch, waited: float, warned: bool) -> bool:
        """Nothing of the batch claimed yet: say so once after the warning delay; past the timeout, cancel and stop."""
        where = getattr(self.client, "url", "the collector")
        if self.settings.no_runner_timeout_s is not None and waited >= self.settings.no_runner_timeout_s:
            self.client.cancel(batch.rollout_ids)
            raise NoRunner(
                f"no runner claimed any of the {len(batch.rollout_ids)} rollouts queued {waited:.0f} s ago on "
                f"{where}: start one (`lightning-otel runner --collector {where} --agent module:agent`, or the "
                "example's `runner` mode)"
            )
        if not warned and waited >= self.settings.no_runner_warning_s:
            log.warning(
                "no runner has claimed any of the %d rollouts queued %.0f s ago on %s: is a runner running against "
                "this collector?", len(batch.rollout_ids), waited, where,
            )  # fmt: skip
            return True
        return warned

    def latest_resources(self) -> dict[str, Any]:
        """This run's latest published resources (what a new policy joins: a prompt template or settings stay)."""
        from lightning_otel.agent_api.resources import resources_from_json
        from lightning_otel.collector.client import CollectorError

        try:
            return resources_from_json(self.client.resources("latest", run_id=self.run_id)["resources"])
        except CollectorError:  # none published yet
            return {}

    def start(self) -> None:
        """Start this run on the collector, holding its lease: the rollouts of runs no longer running (a training
        that died, or ended without cancelling them) are cancelled, so runners never spend this training's time on
        them; no live run's are touched."""
        cancelled = self.lease.start()
        if cancelled:
            log.warning("cancelled %d rollouts that trainings no longer running left on this collector", cancelled)

    def _ensure_started(self) -> None:
        if not self.lease.started:
            self.start()

    def finish(self, state: str = "finished") -> None:
        """End this run on the collector (`finished` or `failed`): the rollouts it queued that are not final yet are
        cancelled (none of them runs for another training), and runners serving it stop or move on."""
        if self.lease.started and (cancelled := self.lease.end(state)):
            log.info("cancelled %d rollouts this training queued and no longer needs", cancelled)

    def collect(self, batch: RolloutBatch, timeout: float | None = None) -> BatchResult:
        """Wait for the batch and read its succeeded rollouts' spans, adapted. Rollouts are read as they finish,
        while the rest of the batch runs (`EarlyReads`: those whose spans are complete then); the others in one
        call at the end, waiting up to `span_wait_s` for their spans to be complete."""
        started = time.monotonic()
        early = EarlyReads(self.client, self.adapter, self._flush_span_sources)
        records = self.wait(batch, timeout, on_final=early.read)
        waited = time.monotonic() - started
        unfinished = [record["rollout_id"] for record in records if record["status"] not in FINAL_STATUSES]
        if unfinished:  # past the caller's timeout: stop them so runners move on
            self.client.cancel(unfinished)
        result = self.read(batch, records, early=early)
        result.wall_s, result.wait_s = time.monotonic() - started, waited
        return result

    def read(
        self, batch: RolloutBatch, records: list[dict[str, Any]], *, early: EarlyReads | None = None
    ) -> BatchResult:
        """The batch's rollouts as they are (`records`: their queue records, final ones read): every succeeded
        rollout's spans, complete (`span_wait_s`), adapted; those `early` read already are taken from it, the rest
        read in one call."""
        started = time.monotonic()
        succeeded = [record for record in records if record["status"] == "succeeded"]
        ready = early.taken(succeeded) if early is not None else {}
        rest = [record for record in succeeded if record["rollout_id"] not in ready]
        read_spans: dict[str, list[Span]] = {}
        incomplete: dict[str, int] = {}
        if rest:  # what early reads took was read after a flush of its own
            self._flush_span_sources()
            read = self.client.complete_rollouts_spans(
                [r["rollout_id"] for r in rest],
                attempt_ids=[r["attempt_id"] for r in rest],
                wait_s=self.settings.span_wait_s,
            )
            read_spans, incomplete = read["rollouts"], read["incomplete"]
        gateway_calls = None
        if self._call_counters:
            attempts = [(r["rollout_id"], r["attempt_id"]) for r in succeeded]
            gateway_calls = sum(served(attempts) for served in self._call_counters)
        if incomplete:
            log.warning(
                "%d of %d rollouts read with spans missing after waiting %.0f s for their parents (another "
                "process's export was late or lost; their samples may lack calls or agent names): %s",
                len(incomplete), len(succeeded), self.settings.span_wait_s, ", ".join(sorted(incomplete)[:5]),
            )  # fmt: skip
        spans: dict[str, list[Span]] = {}
        adapted: dict[str, AdaptedRollout] = {}
        for record in succeeded:  # in the batch's order, whichever read found them
            rollout_id = record["rollout_id"]
            if rollout_id in ready:
                spans[rollout_id], adapted[rollout_id] = ready[rollout_id]
            else:
                spans[rollout_id] = read_spans.get(rollout_id, [])
                adapted[rollout_id] = self.adapter.adapt(spans[rollout_id], task_id=record["task_id"])
        return BatchResult(
            batch, records, spans, adapted, wall_s=time.monotonic() - started, incomplete=incomplete,
            gateway_calls=gateway_calls,
        )  # fmt: skip

    def late_spans(self, result: BatchResult, wait_s: float = 6.0) -> int:
        """How many spans of the batch's succeeded rollouts reached the store after `collect` read them, `wait_s`
        later (an agent service's SDK exports every 5 s by default): late spans, not an uninstrumented client."""
        succeeded = [r for r in result.rollouts if r["status"] == "succeeded"]
        if not succeeded:
            return 0
        time.sleep(wait_s)
        self._flush_span_sources()
        now = self.client.rollouts_spans(
            [r["rollout_id"] for r in succeeded], attempt_ids=[r["attempt_id"] for r in succeeded]
        )
        return sum(max(0, len(now.get(rid, [])) - len(result.spans.get(rid, []))) for rid in now)

    def run_batch(
        self, tasks: Sequence[Any], *, n: int = 1, mode: str = "train", metadata: dict[str, Any] | None = None
    ) -> BatchResult:
        return self.collect(self.submit(tasks, n=n, mode=mode, metadata=metadata))

    def update_resources(self, resources: dict[str, Any]) -> int:
        """Publish this run's new resources (e.g. the policy endpoint after a weight sync); returns the version.
        Services that start on their own learn the policy's address from the notify file, rewritten here."""
        self._ensure_started()
        return publish_resources(self.client, resources, self.settings.policy_notify_file, run_id=self.run_id)


def publish_resources(
    client: Client, resources: dict[str, Any], notify_file: Path | None, *, run_id: str | None = None
) -> int:
    """Put `resources` on the collector for run `run_id` (runners read them on their next claim) and, with a notify
    file, write the policy's address there; returns the version."""
    version = int(client.put_resources(resources_to_json(resources), run_id=run_id))
    if notify_file is not None and write_policy_address(notify_file, resources, version):
        log.info("policy address (version %d) written to %s", version, notify_file)
    return version
