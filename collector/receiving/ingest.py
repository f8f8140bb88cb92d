"""The receiving pipeline shared by OTLP/HTTP and OTLP/gRPC: admission, decoding, storing, metrics.

Admission happens before any decoding: a bounded in-flight byte budget turns overload into a quick 503 /
UNAVAILABLE the client retries, instead of memory growth. Spans are acknowledged only after the store committed them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from lightning_otel.collector.receiving.log_records import DecodedLogs, write_logs
from lightning_otel.collector.receiving.otlp_decoding import DecodedRequest
from lightning_otel.collector.stores.change_signal import ChangeSignal
from lightning_otel.collector.stores.span_record import SpanRecord
from lightning_otel.collector.stores.store import SpanStore, WriteResult

logger = logging.getLogger(__name__)


class Overloaded(RuntimeError):
    """The in-flight budget is spent: answer 503 / UNAVAILABLE with a retry delay."""


@dataclass(slots=True)
class IngestResult:
    accepted: int
    duplicates: int
    rejected: int
    error_message: str


class CollectorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "agl_collector_requests",
            "OTLP export requests by transport and outcome",
            ["transport", "outcome"],
            registry=self.registry,
        )
        self.spans_stored = Counter(
            "agl_collector_spans_stored", "Spans committed to the store", registry=self.registry
        )
        self.spans_duplicate = Counter(
            "agl_collector_spans_duplicate", "Spans already stored (resent)", registry=self.registry
        )
        self.spans_rejected = Counter(
            "agl_collector_spans_rejected", "Spans rejected (reported in partial_success)", registry=self.registry
        )
        self.spans_quarantined = Counter(
            "agl_collector_spans_quarantined",
            "Decoded spans the database refused to store (rejected alone; the rest of their batch was stored)",
            registry=self.registry,
        )
        self.spans_without_rollout = Counter(
            "agl_collector_spans_without_rollout",
            "Spans stored without agl.rollout.id (kept for Jaeger)",
            registry=self.registry,
        )
        self.log_records_stored = Counter(
            "agl_collector_log_records_stored",
            "Log records committed to the store (resent ones once)",
            registry=self.registry,
        )
        self.log_records_rejected = Counter(
            "agl_collector_log_records_rejected",
            "Log records rejected (reported in partial_success)",
            registry=self.registry,
        )
        self.in_flight_bytes = Gauge(
            "agl_collector_in_flight_bytes", "Request bytes being processed", registry=self.registry
        )
        self.ack_seconds = Histogram(
            "agl_collector_ack_seconds",
            "Time from admission to acknowledgement",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.spans_deleted = Counter(
            "agl_collector_spans_deleted", "Spans deleted by --retention", registry=self.registry
        )
        self.forward_batches = Counter(
            "agl_collector_forward_batches",
            "Forwarded batches by destination/outcome",
            ["destination", "outcome"],
            registry=self.registry,
        )
        self.forward_spans = Counter(
            "agl_collector_forward_spans",
            "Forwarded spans by destination/outcome",
            ["destination", "outcome"],
            registry=self.registry,
        )


class Ingestor:
    def __init__(
        self, store: SpanStore, *, max_in_flight_bytes: int = 64 * 1024 * 1024, metrics: CollectorMetrics | None = None
    ) -> None:
        self.store = store
        self.max_in_flight_bytes = max_in_flight_bytes
        self.metrics = metrics or CollectorMetrics()
        self._in_flight = 0
        self._commits = ChangeSignal()
        self.on_commit: Callable[[Sequence[SpanRecord]], None] | None = None  # rollout heartbeats

    def admit(self, size: int) -> Callable[[], None]:
        """Reserve `size` bytes of the in-flight budget (before reading or decoding); returns the release."""
        if self._in_flight > 0 and self._in_flight + size > self.max_in_flight_bytes:
            raise Overloaded(f"collector busy: {self._in_flight} bytes in flight")
        self._in_flight += size
        self.metrics.in_flight_bytes.set(self._in_flight)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._in_flight -= size
                self.metrics.in_flight_bytes.set(self._in_flight)

        return release

    @property
    def commit_generation(self) -> int:
        """Counts commits that stored new spans; read it before a query, then `wait_for_commit(after=...)`."""
        return self._commits.generation

    def notify_commit(self) -> None:
        """Spans were committed by another collector on the same store: wake the readers waiting for them."""
        self._commits.notify()

    async def wait_for_commit(self, timeout_s: float, *, after: int) -> bool:
        """Sleep until a commit newer than generation `after` (or `timeout_s`): readers waiting for a rollout's
        spans are woken by writes instead of polling. Returns False on timeout."""
        return await self._commits.wait(timeout_s, after=after)

    async def ingest(self, decoded: DecodedRequest) -> IngestResult:
        """Store the decoded spans; returns once they are committed (the caller acknowledges after that)."""
        started = time.perf_counter()
        result: WriteResult = await self.store.write(decoded.records)
        if result.inserted:
            self._commits.notify()
            if self.on_commit is not None:
                self.on_commit(decoded.records)
        metrics = self.metrics
        metrics.ack_seconds.observe(time.perf_counter() - started)
        metrics.spans_stored.inc(result.inserted)
        metrics.spans_duplicate.inc(result.duplicates)
        rejected, message = decoded.rejected, decoded.error_message
        if result.rejected:
            metrics.spans_quarantined.inc(len(result.rejected))
            logger.warning(
                "lightning-otel collector: the store refused %d span(s), the rest are stored: %s",
                len(result.rejected),
                "; ".join(result.rejected[:5]),
            )
            rejected += len(result.rejected)
            message = DecodedRequest([], rejected, decoded.errors + result.rejected).error_message
        metrics.spans_rejected.inc(rejected)
        without_rollout = sum(1 for record in decoded.records if record.rollout_id is None)
        if without_rollout:
            metrics.spans_without_rollout.inc(without_rollout)
        return IngestResult(result.inserted, result.duplicates, rejected, message)

    async def ingest_logs(self, decoded: DecodedLogs) -> IngestResult:
        """Store the decoded log records; returns once they are committed."""
        started = time.perf_counter()
        await write_logs(self.store, decoded.rows)
        self.metrics.ack_seconds.observe(time.perf_counter() - started)
        self.metrics.log_records_stored.inc(len(decoded.rows))
        self.metrics.log_records_rejected.inc(decoded.rejected)
        return IngestResult(len(decoded.rows), 0, decoded.rejected, decoded.error_message)
