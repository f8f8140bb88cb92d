"""A span whose identity is decided on the caller's thread and whose SDK object is built off it.

Starting an OpenTelemetry SDK span costs the caller ~15-60 µs (span object, attribute validation, every span
processor's `on_start`); setting ~1,400 token ids and logprobs on it costs ~300 µs more (the SDK checks every
element). An LLM call needs neither while it is in flight: only its identity, for the `traceparent` header and
for child spans. So `DeferredSpan.start` does on the caller's thread exactly what decides the span's identity, as
the SDK's `Tracer.start_span` does it (trace id, the sampler's decision, span id, trace flags and state), and
puts a `NonRecordingSpan` with that `SpanContext` in the context. `end()`, run by the span finisher's thread,
starts the real SDK span with those ids and decision (a copy of the tracer whose id generator and sampler replay
them), inside the caller's context so span processors see what they would have seen, then sets the response
attributes and ends it at the times taken on the caller's thread.

Non-SDK tracers (a no-op or third-party API implementation), and SDK releases other than the tested ones, get an
ordinary span started on the caller's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import context, trace
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import sampling
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags

from lightning_otel.capture import genai_events
from lightning_otel.capture.otel_internals import can_defer, replay_tracer, set_numeric_arrays

logger = logging.getLogger(__name__)

_RANDOM_TRACE_ID_FLAG = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)  # W3C trace context level 2 (SDK >= 1.39)


class DeferredSpan:
    """One span: identity fixed by `start()` on the caller's thread, SDK span built and ended by `end()`."""

    __slots__ = (
        "_attributes",
        "_caller_context",
        "_decision",
        "_kind",
        "_name",
        "_parent",
        "_start_time",
        "_started_span",
        "_tracer",
        "in_flight",
    )

    def __init__(self, in_flight: trace.Span, started: trace.Span | None = None) -> None:
        self.in_flight = in_flight
        self._started_span = started
        self._tracer: sdk_trace.Tracer | None = None  # set when the span records: `end()` builds it
        self._decision: sampling.SamplingResult | None = None
        self._name = ""
        self._kind = SpanKind.INTERNAL
        self._attributes: Mapping[str, Any] = {}
        self._parent: context.Context | None = None
        self._caller_context: context.Context | None = None
        self._start_time = 0

    @classmethod
    def start(
        cls,
        tracer: trace.Tracer,
        name: str,
        *,
        kind: SpanKind,
        attributes: Mapping[str, Any],
        parent: context.Context | None,
        start_time: int,
    ) -> DeferredSpan:
        """Decide the span's identity as `Tracer.start_span` would, in the current context."""
        if not can_defer(tracer):
            started = tracer.start_span(name, parent, kind, attributes, start_time=start_time)
            return cls(started, started)
        caller_context = context.get_current()
        parent_context = trace.get_current_span(parent if parent is not None else caller_context).get_span_context()
        ids = tracer.id_generator
        if parent_context.is_valid:
            trace_id = parent_context.trace_id
            random_trace_id = bool(parent_context.trace_flags & _RANDOM_TRACE_ID_FLAG)
        else:
            trace_id = ids.generate_trace_id()
            is_random = getattr(ids, "is_trace_id_random", None)
            random_trace_id = bool(is_random()) if is_random is not None else False
        decision = tracer.sampler.should_sample(parent, trace_id, name, kind, attributes, ())
        flags = TraceFlags.SAMPLED if decision.decision.is_sampled() else TraceFlags.DEFAULT
        if random_trace_id:
            flags |= _RANDOM_TRACE_ID_FLAG
        span_context = SpanContext(
            trace_id,
            ids.generate_span_id(),
            is_remote=False,
            trace_flags=TraceFlags(flags),
            trace_state=decision.trace_state,
        )
        span = cls(NonRecordingSpan(span_context))
        if decision.decision.is_recording():
            span._tracer = tracer
            span._decision = decision
            span._name = name
            span._kind = kind
            span._attributes = attributes
            span._parent = parent
            span._caller_context = caller_context
            span._start_time = start_time
        return span

    def _build(self) -> trace.Span | None:
        """The SDK span with the planned identity (finisher thread)."""
        if self._started_span is not None:
            return self._started_span
        if self._tracer is None or self._decision is None:
            return None  # sampled out: like the SDK, nothing is recorded
        planned = self.in_flight.get_span_context()
        random_trace_id = bool(planned.trace_flags & _RANDOM_TRACE_ID_FLAG)
        replay = replay_tracer(self._tracer, planned.trace_id, planned.span_id, random_trace_id, self._decision)
        token = context.attach(self._caller_context) if self._caller_context is not None else None
        try:
            span = replay.start_span(
                self._name, self._parent, self._kind, self._attributes, start_time=self._start_time
            )
        finally:
            if token is not None:
                context.detach(token)
        if span.get_span_context().span_id != planned.span_id:  # pragma: no cover - an SDK that ignores them
            logger.debug("lightning-otel: the SDK did not keep the planned span id for %s", self._name)
        return span

    def end(
        self,
        attributes: Mapping[str, Any],
        arrays: Mapping[str, Sequence[Any]],
        *,
        end_time: int,
        error: BaseException | None = None,
        event: tuple[str, Mapping[str, Any], int] | None = None,
    ) -> None:
        """Build (if deferred), set `attributes` and the numeric `arrays`, record `error` and `event`, end."""
        span = self._build()
        if span is None:
            return
        span.set_attributes(attributes)
        set_numeric_arrays(span, arrays)
        if event is not None:
            name, event_attributes, timestamp = event
            if not genai_events.emit(span, name, event_attributes, timestamp):  # a log record where one is sent
                span.add_event(name, event_attributes, timestamp=timestamp)
        if error is not None:
            span.record_exception(error)
            span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}")
        span.end(end_time=end_time)
