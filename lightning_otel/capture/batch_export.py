"""The span processor in front of our exporters: a queue and a worker like the SDK's `BatchSpanProcessor`, except
that `force_flush` exports the spans that had ended when it was called and no more.

The SDK's flush (1.44, 1.45) exports until its queue is empty, taking whatever is queued at each round. A runner
flushes when a rollout finishes while its other rollouts keep ending spans, so its flushes chased them: 4.6
requests per flush, 5 spans each, measured over 800 rollouts of `benchmarks/trainer_throughput.py`'s agent. Each
request is an HTTP round trip for the runner and a transaction for the collector, and the finished rollout waited
for all of them. Read-your-writes needs only the spans that had ended before the flush; the ones ending during it
go with the next flush or the worker's next batch.

`OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_QUEUE_SIZE` and `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` apply as they do to the
SDK's processor. Only processors we add for exporters we build use it; a user's own processors are untouched.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import weakref

from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

logger = logging.getLogger(__name__)


def _setting(name: str, given: int | None, default: int) -> int:
    if given is not None:
        return given
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        logger.warning("lightning-otel: %s=%r is not an integer; using %d", name, os.environ[name], default)
        return default
    return value if value > 0 else default


class BatchExportProcessor(SpanProcessor):
    """Ended, sampled spans wait in a queue; a worker thread exports them every `schedule_delay_millis`, or as soon
    as `max_export_batch_size` wait; `force_flush` exports those queued when it was called (in batches of at most
    `max_export_batch_size`), after any export in flight."""

    def __init__(
        self,
        span_exporter: SpanExporter,
        *,
        max_queue_size: int | None = None,
        schedule_delay_millis: int | None = None,
        max_export_batch_size: int | None = None,
    ) -> None:
        self.span_exporter = span_exporter  # SimpleSpanProcessor's name for it: `exporter_endpoints` reads it
        self._max_queue_size = _setting("OTEL_BSP_MAX_QUEUE_SIZE", max_queue_size, 2048)
        self._delay_s = _setting("OTEL_BSP_SCHEDULE_DELAY", schedule_delay_millis, 5000) / 1000
        self._batch_size = min(_setting("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", max_export_batch_size, 512),
                               self._max_queue_size)  # fmt: skip
        self._queue: collections.deque[ReadableSpan] = collections.deque()  # appended right, exported from the left
        self._export_lock = threading.Lock()
        self._wake = threading.Event()
        self._shutdown = False
        self._dropped = 0
        self._worker = self._start_worker()
        if hasattr(os, "register_at_fork"):  # a forked child has the queue but not the thread
            restart = weakref.WeakMethod(self._after_fork)
            os.register_at_fork(after_in_child=lambda: (method := restart()) and method())

    def _start_worker(self) -> threading.Thread:
        worker = threading.Thread(target=self._work, name="lightning-otel-span-export", daemon=True)
        worker.start()
        return worker

    def _after_fork(self) -> None:
        self._queue.clear()
        self._export_lock = threading.Lock()
        self._wake = threading.Event()
        self._worker = self._start_worker()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if self._shutdown or not (span.context and span.context.trace_flags.sampled):
            return
        if len(self._queue) >= self._max_queue_size:
            self._dropped += 1
            if self._dropped == 1 or self._dropped % 1000 == 0:
                logger.warning("lightning-otel: the span export queue is full (%d spans): %d spans dropped so far",
                               self._max_queue_size, self._dropped)  # fmt: skip
            return
        self._queue.append(span)
        if len(self._queue) >= self._batch_size and not self._wake.is_set():
            self._wake.set()

    def _work(self) -> None:
        while not self._shutdown:
            self._wake.wait(self._delay_s)
            self._wake.clear()
            if not self._shutdown:
                self._export(len(self._queue))

    def _export(self, count: int) -> bool:
        """Export the `count` oldest queued spans, or as many as are left after an export that was in flight."""
        ok = True
        with self._export_lock, suppress_instrumentation():  # the export's own HTTP calls are not traced
            count = min(count, len(self._queue))
            while count > 0:
                batch = [self._queue.popleft() for _ in range(min(count, self._batch_size))]
                count -= len(batch)
                try:
                    ok = self.span_exporter.export(batch) is SpanExportResult.SUCCESS and ok
                except Exception:
                    logger.exception("lightning-otel: exporting %d spans failed", len(batch))
                    ok = False
        return ok

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export every span that has ended by now; False if an export failed (or after shutdown). The exporter's
        own retries bound the time, as with the SDK's processor."""
        if self._shutdown:
            return False
        return self._export(len(self._queue))

    def shutdown(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        self._wake.set()
        self._worker.join(30.0)
        self._export(len(self._queue))
        self.span_exporter.shutdown()
