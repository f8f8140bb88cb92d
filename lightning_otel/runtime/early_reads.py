"""A batch's rollouts read while the rest of the batch still runs (`TrainingRun.collect`).

Read at the end, a batch of 2,000 rollouts (20,000 spans) took 1.29-1.45 s to read and adapt on two cores, with the
runners done and a core idle: ~8% of the batch (`benchmarks/trainer_throughput.py`). Read as they finish, each
poll's newly final rollouts are read while the others run, and the end reads only the last poll's.

The same rule decides when a rollout is read as at the end: its runner flushed before reporting it; the trainer's
own span sources (the policy gateway) are flushed first; and its spans must be complete, every parent in the
store (`span_completeness`). A rollout that is not complete yet is not waited for here: it is left to the end's
read, which waits up to `span_wait_s`. So is every rollout of a poll when a span source did not flush in time, and
a rollout with no span at all. What the rule cannot see, it could not see at the end either: a span exported late
that names no missing parent (a late process whose spans hang under the runner's, with no gateway call beneath
them) is missed by a read a second after its rollout finished, where a read at the end of a long batch might have
caught it by chance. `Trainer.dev` looks for late spans when a batch gives no sample.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning_otel.adapters.triplets import AdaptedRollout, TraceToTriplet
from lightning_otel.collector.client import Client
from lightning_otel.flat_span import Span


class EarlyReads:
    """`read` takes the final records of a poll; `taken` hands over what was read, by rollout."""

    def __init__(self, client: Client, adapter: TraceToTriplet, flush_sources: Callable[..., bool]) -> None:
        self.client = client
        self.adapter = adapter
        self.flush_sources = flush_sources
        self._read: dict[str, tuple[str, list[Span], AdaptedRollout]] = {}  # rollout -> (attempt, spans, adapted)

    def read(self, records: list[dict[str, Any]]) -> None:
        """Read and adapt the succeeded ones whose spans are complete now (no waiting)."""
        succeeded = [record for record in records if record["status"] == "succeeded"]
        if not succeeded or not self.flush_sources(warn=False):
            return
        found = self.client.complete_rollouts_spans(
            [r["rollout_id"] for r in succeeded], attempt_ids=[r["attempt_id"] for r in succeeded], wait_s=0
        )
        for record in succeeded:
            rollout_id = record["rollout_id"]
            spans = found["rollouts"].get(rollout_id) or []
            if not spans or rollout_id in found["incomplete"]:
                continue
            adapted = self.adapter.adapt(spans, task_id=record["task_id"])
            self._read[rollout_id] = (record["attempt_id"], spans, adapted)

    def taken(self, succeeded: list[dict[str, Any]]) -> dict[str, tuple[list[Span], AdaptedRollout]]:
        """(spans, adapted) of those of `succeeded` read here, for the attempt that succeeded."""
        ready: dict[str, tuple[list[Span], AdaptedRollout]] = {}
        for record in succeeded:
            early = self._read.get(record["rollout_id"])
            if early is not None and early[0] == record["attempt_id"]:
                ready[record["rollout_id"]] = (early[1], early[2])
        return ready
