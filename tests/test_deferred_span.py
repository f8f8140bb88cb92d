"""LLM spans get their identity on the caller's thread and are built on the span finisher's: the result must be
the span the SDK would have made (ids, sampling, parent, processors' view), and what went over the wire must
name it."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

import lightning_otel
from lightning_otel.capture.deferred_span import DeferredSpan
from lightning_otel.capture.otel_internals import set_numeric_arrays

HIGH_TRACE_ID = 0xFFFF_FFFF_FFFF_FFFF_FFFF_FFFF_FFFF_FFF0  # above any ratio bound: TraceIdRatioBased drops it
LOW_TRACE_ID = 0x0000_0000_0000_0000_0000_0000_0000_0010  # below every bound: kept


def _provider(sampler=ALWAYS_ON, limits=None) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler, span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _parent(trace_id: int, sampled: bool) -> context.Context:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    return trace.set_span_in_context(NonRecordingSpan(SpanContext(trace_id, 0xABC, True, flags)))


def _deferred(tracer, parent=None, attributes=None) -> DeferredSpan:
    return DeferredSpan.start(
        tracer,
        "chat m",
        kind=SpanKind.CLIENT,
        attributes=attributes or {"a": 1},
        parent=parent,
        start_time=time.time_ns(),
    )


@pytest.mark.parametrize(
    "sampler",
    [ALWAYS_ON, ALWAYS_OFF, ParentBased(ALWAYS_ON), ParentBased(ALWAYS_OFF), TraceIdRatioBased(0.5)],
    ids=["always_on", "always_off", "parent_on", "parent_off", "ratio"],
)
@pytest.mark.parametrize("trace_id", [HIGH_TRACE_ID, LOW_TRACE_ID], ids=["high_id", "low_id"])
@pytest.mark.parametrize("sampled_parent", [True, False], ids=["sampled_parent", "unsampled_parent"])
def test_sampling_and_flags_match_the_sdk(sampler, trace_id, sampled_parent):
    provider, exporter = _provider(sampler)
    tracer = provider.get_tracer("t")
    parent = _parent(trace_id, sampled_parent)
    sdk_span = tracer.start_span("chat m", parent, SpanKind.CLIENT, {"a": 1})
    sdk_records = sdk_span.is_recording()
    sdk_span.end()
    exporter.clear()

    deferred = _deferred(tracer, parent)
    deferred.end({}, {}, end_time=time.time_ns())
    planned = deferred.in_flight.get_span_context()
    assert planned.trace_flags == sdk_span.get_span_context().trace_flags
    assert planned.trace_id == trace_id
    exported = exporter.get_finished_spans()
    assert len(exported) == (1 if sdk_records else 0)
    if exported:
        assert exported[0].context == planned
        assert exported[0].parent.span_id == 0xABC


def test_root_span_keeps_the_planned_identity_times_and_attributes():
    provider, exporter = _provider()
    tracer = provider.get_tracer("t")
    started = time.time_ns()
    deferred = DeferredSpan.start(
        tracer,
        "chat m",
        kind=SpanKind.CLIENT,
        attributes={"gen_ai.request.model": "m"},
        parent=None,
        start_time=started,
    )
    assert not deferred.in_flight.is_recording()  # nothing is built on the caller's thread
    ended = time.time_ns()
    ids = list(range(2_000))
    deferred.end({"gen_ai.response.id": "r1"}, {"ids": ids, "logprobs": [-0.5] * 30}, end_time=ended)
    (span,) = exporter.get_finished_spans()
    assert span.context == deferred.in_flight.get_span_context()
    assert span.context.trace_flags.sampled
    assert span.parent is None
    assert (span.start_time, span.end_time, span.kind, span.name) == (started, ended, SpanKind.CLIENT, "chat m")
    assert span.attributes["gen_ai.request.model"] == "m" and span.attributes["gen_ai.response.id"] == "r1"
    assert span.attributes["ids"] == tuple(ids) and span.attributes["logprobs"] == (-0.5,) * 30


def test_span_processors_see_the_callers_context_though_the_span_is_built_elsewhere():
    seen: list[tuple[str | None, str | None]] = []

    class BaggageProbe(SpanProcessor):
        def on_start(self, span, parent_context=None):
            seen.append((baggage.get_baggage("agl.rollout.id"), threading.current_thread().name))

    provider, _ = _provider()
    provider.add_span_processor(BaggageProbe())
    token = context.attach(baggage.set_baggage("agl.rollout.id", "ro-9"))
    try:
        deferred = _deferred(provider.get_tracer("t"))
    finally:
        context.detach(token)
    builder = threading.Thread(target=deferred.end, args=({}, {}), kwargs={"end_time": time.time_ns()}, name="b")
    builder.start()
    builder.join()
    assert seen == [("ro-9", "b")]
    assert baggage.get_baggage("agl.rollout.id") is None  # the builder's context is restored


def test_non_sdk_tracers_get_an_ordinary_span():
    deferred = _deferred(trace.NoOpTracer())
    deferred.end({"x": 1}, {"ids": [1, 2, 3]}, end_time=time.time_ns())
    assert not deferred.in_flight.get_span_context().is_valid


@pytest.mark.parametrize(
    ("values", "limits"),
    [
        ([1, 2, 3] * 10, None),
        ([0.5, -1.0] * 10, None),
        ([1, 2.0] * 10, None),  # mixed: the SDK drops the attribute
        ([True, False] * 10, None),
        ([], None),
        ([1, 2, 3] * 10, SpanLimits(max_span_attributes=2)),  # over the limit: the SDK evicts
    ],
    ids=["ints", "floats", "mixed", "bools", "empty", "limited"],
)
def test_numeric_arrays_end_up_as_the_sdk_would_set_them(values, limits):
    provider, _ = _provider(limits=limits)
    tracer = provider.get_tracer("t")
    ours = tracer.start_span("a", attributes={"first": 1, "second": 2})
    sdk = tracer.start_span("b", attributes={"first": 1, "second": 2})
    set_numeric_arrays(ours, {"ids": values})
    sdk.set_attribute("ids", values)
    assert dict(ours.attributes) == dict(sdk.attributes)
    assert ours.dropped_attributes == sdk.dropped_attributes


def test_the_traceparent_sent_names_the_llm_span_and_inner_spans_are_its_children(openai_test_server, agl_spans):
    tracer = trace.get_tracer("inner")
    inner_parents: list[int] = []

    def inner_span(request: httpx.Request) -> None:  # runs inside openai's request, like an httpx instrumentation
        with tracer.start_as_current_span("inner") as span:
            inner_parents.append(span.parent.span_id)

    extra_headers = {"x-user": "1"}
    client = openai.OpenAI(
        base_url=openai_test_server.base_url,
        api_key="t",
        max_retries=0,
        http_client=httpx.Client(event_hooks={"request": [inner_span]}),
    )
    with lightning_otel.rollout_context("ro-tp", "at-1"):
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_headers=extra_headers
        )
    lightning_otel.flush()
    (llm,) = agl_spans.llm_spans()
    headers = openai_test_server.requests[-1].headers
    context_of = llm.get_span_context()
    assert context_of.trace_flags.sampled
    assert (
        headers["traceparent"]
        == f"00-{context_of.trace_id:032x}-{context_of.span_id:016x}-{context_of.trace_flags:02x}"
    )
    assert "agl.rollout.id=ro-tp" in headers["baggage"]
    assert headers["x-user"] == "1" and extra_headers == {"x-user": "1"}  # the caller's dict is left alone
    assert inner_parents == [context_of.span_id]
