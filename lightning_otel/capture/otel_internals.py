"""The one module that touches OpenTelemetry's internals (the SDK's, and one read of the API's), on the releases it
was tested against only.

- `set_numeric_arrays`: token ids and logprobs go into a span's `BoundedAttributes` after one C-level type check
  instead of the SDK's per-element validation (~20 vs ~200 ns per element).
- `replay_tracer`: a copy of an SDK `Tracer` (the caller's tracer is not changed) whose id generator and sampler
  hand back the identity and sampling decision made earlier on the caller's thread (`deferred_span`).

- `composite_parts`: the propagators inside the global `CompositePropagator` (read only), so that the W3C
  baggage header can be cached per distinct baggage (`propagation.inject_current`).
- `exporter_endpoints`: where an SDK provider's span processors export (read only), so that `instrument()` adds its
  exporter to a provider someone else installed only when that provider does not already send there.

On any other release `can_defer` is False, `set_numeric_arrays` is `span.set_attributes`, and `composite_parts`
and `exporter_endpoints` are None (the global propagator injects as it is; the provider's exporters are unknown).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import sampling

from lightning_otel.capture.otlp_encoding import numeric_array_kind
from lightning_otel.capture.tested_versions import is_tested

SDK_INTERNALS = is_tested("opentelemetry-sdk")
API_INTERNALS = is_tested("opentelemetry-api")


def composite_parts(textmap: TextMapPropagator) -> Sequence[TextMapPropagator] | None:
    """The propagators a `CompositePropagator` holds, None for any other propagator (or an untested API release)."""
    if not API_INTERNALS or not isinstance(textmap, CompositePropagator):
        return None
    parts = getattr(textmap, "_propagators", None)
    return parts if isinstance(parts, (list, tuple)) else None


def exporter_endpoints(provider: sdk_trace.TracerProvider) -> list[str] | None:
    """The endpoints of the OTLP exporters behind `provider`'s batch and simple span processors ([] if none), None
    when that cannot be read (an untested SDK release, a processor of another shape)."""
    if not SDK_INTERNALS:
        return None
    processors = getattr(getattr(provider, "_active_span_processor", None), "_span_processors", None)
    if not isinstance(processors, tuple | list):
        return None
    endpoints = []
    for processor in processors:
        exporter = getattr(processor, "span_exporter", None)  # SimpleSpanProcessor
        if exporter is None:  # BatchSpanProcessor
            exporter = getattr(getattr(processor, "_batch_processor", None), "_exporter", None)
        endpoint = getattr(exporter, "_endpoint", None)
        if isinstance(endpoint, str):
            endpoints.append(endpoint)
    return endpoints


def can_defer(tracer: trace.Tracer) -> bool:
    """Whether a span of `tracer` can have its identity decided here and its SDK object built later."""
    if not SDK_INTERNALS or not isinstance(tracer, sdk_trace.Tracer):
        return False
    is_enabled = getattr(tracer, "_is_enabled", None)  # per-scope tracer config
    return is_enabled is None or bool(is_enabled())


class _FixedIds:
    """Id generator of the replay tracer: hands out the ids chosen on the caller's thread."""

    def __init__(self, trace_id: int, span_id: int, random_trace_id: bool) -> None:
        self._trace_id = trace_id
        self._span_id = span_id
        self._random = random_trace_id

    def generate_trace_id(self) -> int:
        return self._trace_id

    def generate_span_id(self) -> int:
        return self._span_id

    def is_trace_id_random(self) -> bool:
        return self._random


class _ReplayedDecision(sampling.Sampler):
    """Sampler of the replay tracer: returns the decision the real sampler made on the caller's thread."""

    def __init__(self, result: sampling.SamplingResult, description: str) -> None:
        self._result = result
        self._description = description

    def should_sample(self, *args: Any, **kwargs: Any) -> sampling.SamplingResult:
        return self._result

    def get_description(self) -> str:
        return self._description


def replay_tracer(
    tracer: sdk_trace.Tracer, trace_id: int, span_id: int, random_trace_id: bool, decision: sampling.SamplingResult
) -> sdk_trace.Tracer:
    """A copy of `tracer` that starts its next span with these ids and this sampling decision."""
    replay = copy.copy(tracer)
    replay.id_generator = _FixedIds(trace_id, span_id, random_trace_id)
    replay.sampler = _ReplayedDecision(decision, tracer.sampler.get_description())
    return replay


def set_numeric_arrays(span: trace.Span, arrays: Mapping[str, Sequence[Any]]) -> None:
    """Set int or float array attributes, checked with one C-level type pass instead of the SDK's per-element
    validation (~20 ns vs ~200 ns per element); anything else, or an unfamiliar SDK, takes `set_attributes`."""
    checked: dict[str, tuple[Any, ...]] = {}
    for key, values in arrays.items():
        if numeric_array_kind(values) is not None:
            checked[key] = tuple(values)
        else:
            span.set_attribute(key, values)  # empty, mixed or odd values: the SDK decides
    bounded = getattr(span, "_attributes", None) if SDK_INTERNALS else None  # None: the public API below
    store = getattr(bounded, "_dict", None)
    lock = getattr(bounded, "_lock", None)
    if (
        not checked
        or type(bounded) is not BoundedAttributes
        or not isinstance(store, dict)
        or lock is None
        or getattr(bounded, "_immutable", True)
        or (bounded.maxlen is not None and len(store) + len(checked) > bounded.maxlen)
    ):
        if checked:
            span.set_attributes(checked)
        return
    with lock:
        store.update(checked)
