"""The span processor in front of our exporters: a flush exports what had ended when it was called, once."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from lightning_otel.capture.batch_export import BatchExportProcessor


class RecordingExporter(SpanExporter):
    """Keeps each export's span names; `during_export` runs inside the first export (spans ending meanwhile)."""

    def __init__(self, during_export: Callable[[], None] | None = None) -> None:
        self.exports: list[list[str]] = []
        self.during_export = during_export
        self.shut_down = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exports.append([span.name for span in spans])
        if self.during_export is not None and len(self.exports) == 1:
            self.during_export()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.shut_down = True


def _provider(exporter: SpanExporter, **options: int) -> tuple[TracerProvider, BatchExportProcessor]:
    provider = TracerProvider()
    processor = BatchExportProcessor(exporter, **options)
    provider.add_span_processor(processor)
    return provider, processor


def _end_spans(provider: TracerProvider, *names: str) -> None:
    tracer = provider.get_tracer("test")
    for name in names:
        tracer.start_span(name).end()


def test_a_flush_exports_the_spans_that_had_ended_in_one_request_not_those_ending_meanwhile() -> None:
    """A runner's other rollouts keep ending spans while one rollout's flush is in flight. The SDK's processor
    (1.44, 1.45) went on exporting until its queue was empty: here a second request within the same flush."""
    provider: TracerProvider | None = None
    exporter = RecordingExporter(during_export=lambda: _end_spans(provider, "late-1", "late-2"))  # type: ignore[arg-type]
    provider, _ = _provider(exporter)
    _end_spans(provider, "a", "b", "c")
    assert provider.force_flush()
    assert exporter.exports == [["a", "b", "c"]]
    assert provider.force_flush()  # nothing lost: the late ones go with the next flush
    assert exporter.exports == [["a", "b", "c"], ["late-1", "late-2"]]
    provider.shutdown()


def test_a_flush_waits_for_an_export_in_flight_and_sends_what_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker may be exporting some of the spans a flush must cover: the flush returns after that export,
    having sent the rest, and no span goes twice."""
    release = threading.Event()
    exporter = RecordingExporter(during_export=lambda: release.wait(5))
    provider, processor = _provider(exporter, max_export_batch_size=2, schedule_delay_millis=60_000)
    _end_spans(provider, "a", "b")  # a full batch: the worker wakes and its export blocks
    deadline = time.monotonic() + 5
    while not exporter.exports and time.monotonic() < deadline:
        time.sleep(0.01)
    assert exporter.exports == [["a", "b"]]
    _end_spans(provider, "c")
    flushed = threading.Thread(target=processor.force_flush)
    flushed.start()
    time.sleep(0.05)
    assert flushed.is_alive()  # behind the export in flight
    release.set()
    flushed.join(5)
    assert exporter.exports == [["a", "b"], ["c"]]
    provider.shutdown()


def test_the_worker_exports_full_batches_and_batches_of_the_schedule_without_a_flush() -> None:
    exporter = RecordingExporter()
    provider, _ = _provider(exporter, max_export_batch_size=3, schedule_delay_millis=100)
    _end_spans(provider, "a", "b", "c", "d")
    deadline = time.monotonic() + 5
    while sum(len(batch) for batch in exporter.exports) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [name for batch in exporter.exports for name in batch] == ["a", "b", "c", "d"]
    assert all(len(batch) <= 3 for batch in exporter.exports)
    provider.shutdown()


def test_shutdown_exports_what_is_left_and_shuts_the_exporter_down_and_a_later_flush_says_so() -> None:
    exporter = RecordingExporter()
    provider, processor = _provider(exporter, schedule_delay_millis=60_000)
    _end_spans(provider, "a")
    provider.shutdown()
    assert exporter.exports == [["a"]] and exporter.shut_down
    assert processor.force_flush() is False


def test_unsampled_spans_are_not_queued_and_a_full_queue_drops_loudly(caplog: pytest.LogCaptureFixture) -> None:
    exporter = RecordingExporter()
    unsampled = TracerProvider(sampler=ALWAYS_OFF)
    unsampled.add_span_processor(BatchExportProcessor(exporter))
    _end_spans(unsampled, "never")
    unsampled.force_flush()
    assert exporter.exports == []
    provider, processor = _provider(exporter, max_queue_size=2, schedule_delay_millis=60_000)
    with caplog.at_level(logging.WARNING, logger="lightning_otel.capture.batch_export"):
        _end_spans(provider, "a", "b", "c")
    assert "queue is full" in caplog.text
    processor.force_flush()
    assert exporter.exports == [["a", "b"]]
    provider.shutdown()


def test_the_otel_bsp_variables_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    exporter = RecordingExporter()
    provider, _ = _provider(exporter)
    _end_spans(provider, "a", "b", "c", "d", "e")
    provider.force_flush()
    exports = [batch for batch in exporter.exports if batch]
    assert [name for batch in exports for name in batch] == ["a", "b", "c", "d", "e"]
    assert all(len(batch) <= 2 for batch in exports)
    provider.shutdown()
