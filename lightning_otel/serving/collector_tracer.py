"""A tracer whose spans go to a collector, on a provider of its own: the policy gateway's and the training loop's
spans, exported from the trainer's process without touching the tracing its user set up."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import trace

if TYPE_CHECKING:
    from lightning_otel.collector.client import Client


@dataclass(frozen=True, slots=True)
class CollectorTracer:
    """A tracer exporting to a collector, and `flush`: when it returns, every span it ended is in the store."""

    tracer: trace.Tracer
    flush: Callable[[], bool]


@contextlib.contextmanager
def collector_tracer(client: Client, service_name: str = "agl-policy-gateway") -> Iterator[CollectorTracer]:
    """A tracer whose spans go to the collector `client` talks to (its OTLP/HTTP port, its bearer token), on a
    provider of its own: the trainer's process keeps whatever tracing its user set up. Spans are exported in
    batches; `flush()` before reading a rollout (see `TrainingRun.add_span_source`)."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider

    from lightning_otel.capture.batch_export import BatchExportProcessor
    from lightning_otel.capture.otlp_exporters import otlp_http_exporter
    from lightning_otel.capture.setup import ensure_span_processors, get_tracer
    from lightning_otel.capture.span_finisher import finisher
    from lightning_otel.collector.client import otlp_endpoint_for

    endpoint = otlp_endpoint_for(client.url, client.collector_info())
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
    ensure_span_processors(provider)  # rollout ids stamped from baggage, agent names resolved
    # our exporter: every policy call carries token ids and logprobs, which it encodes ~6x cheaper
    exporter = otlp_http_exporter(endpoint, auth_token=client.auth_token, retry_for_s=client.retry_for_s)
    provider.add_span_processor(BatchExportProcessor(exporter))

    def flush(timeout_s: float = 30.0) -> bool:
        drained = finisher.drain(timeout_s)  # LLM spans still being finished end first
        return bool(provider.force_flush(int(timeout_s * 1000))) and drained

    try:
        yield CollectorTracer(get_tracer(provider), flush)
    finally:
        provider.shutdown()  # flushes what is left


__all__ = ["CollectorTracer", "collector_tracer"]
