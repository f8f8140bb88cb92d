"""Our tracer is built once per provider (the SDK builds a new one on every `get_tracer` call), and follows the
provider `instrument()` sets up."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lightning_otel.capture import tracer as our_tracer


def test_the_tracer_is_reused_per_provider_and_follows_a_new_provider() -> None:
    before = our_tracer._provider
    first, second = TracerProvider(), TracerProvider()
    exporters = []
    for provider in (first, second):
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        exporters.append(exporter)
    try:
        our_tracer.use_provider(first)
        tracer = our_tracer.get_tracer()
        assert our_tracer.get_tracer() is tracer
        our_tracer.use_provider(second)
        with our_tracer.get_tracer().start_as_current_span("on the second"):
            pass
        with our_tracer.get_tracer(first).start_as_current_span("on the first, named"):
            pass
    finally:
        our_tracer.use_provider(before)
    assert [span.name for span in exporters[0].get_finished_spans()] == ["on the first, named"]
    assert [span.name for span in exporters[1].get_finished_spans()] == ["on the second"]
    assert exporters[1].get_finished_spans()[0].instrumentation_scope.name == our_tracer.TRACER_NAME
