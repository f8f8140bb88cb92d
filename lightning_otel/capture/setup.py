"""Tracer provider setup: `instrument()`, `uninstrument()`, `flush()`.

An SDK `TracerProvider` already installed (by the user, `opentelemetry-instrument`, ADK, Ray, agentops...) is reused:
we add our two span processors (rollout stamping, agent tracking) through its public API and leave its exporters
alone; where an endpoint was asked for (argument or `OTEL_EXPORTER_OTLP_*`) and the provider does not export there
yet, our exporter is added to it; where none was and the provider has no OTLP exporter, a warning says so.
Otherwise we install a provider with a batching processor (`batch_export`) over an OTLP exporter, so export never
runs on the agent's hot path.

Standard environment variables apply: `OTEL_SDK_DISABLED`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
`OTEL_TRACES_EXPORTER` (`otlp` | `console` | `none`), `OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL` / `..._TRACES_PROTOCOL` (`http/protobuf` |
`grpc`), `OTEL_EXPORTER_OTLP_HEADERS`, and the `OTEL_BSP_*` batch sizes.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter

from lightning_otel.capture import genai_events
from lightning_otel.capture.agent_naming import AgentTrackingProcessor
from lightning_otel.capture.batch_export import BatchExportProcessor
from lightning_otel.capture.conventions import ConversationTurnProcessor
from lightning_otel.capture.instrumentor_registry import load_instrumentor, selected_names
from lightning_otel.capture.otel_internals import exporter_endpoints
from lightning_otel.capture.rollout_context import RolloutStampingProcessor
from lightning_otel.capture.settings import ContentCapture, settings
from lightning_otel.capture.span_finisher import finisher
from lightning_otel.capture.tracer import current_provider, get_tracer, use_provider

logger = logging.getLogger(__name__)

DEFAULT_HTTP_ENDPOINT = "http://127.0.0.1:4318"
DEFAULT_GRPC_ENDPOINT = "http://127.0.0.1:4317"
PROTOCOLS = ("http/protobuf", "grpc")


@dataclass
class Instrumentation:
    """What `instrument()` set up; `uninstrument()` undoes the patches."""

    tracer_provider: TracerProvider | None
    instrumentors: dict[str, BaseInstrumentor] = field(default_factory=dict)
    owns_provider: bool = False
    disabled: bool = False


_lock = threading.RLock()
_state: Instrumentation | None = None
# Weakly keyed by the provider itself, not by id(): a provider that is gone may leave its address to a new one (a
# gateway's per-run provider), which must get processors of its own.
_processors: weakref.WeakKeyDictionary[TracerProvider, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def sdk_disabled() -> bool:
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def ensure_span_processors(provider: Any) -> bool:
    """Add our processors to an SDK provider once; re-enable them after `uninstrument()`. False if not SDK."""
    if not isinstance(provider, TracerProvider):
        return False
    with _lock:
        pair = _processors.get(provider)
        if pair is None:
            pair = (RolloutStampingProcessor(), AgentTrackingProcessor(), ConversationTurnProcessor())
            for processor in pair:
                provider.add_span_processor(processor)
            _processors[provider] = pair
        for processor in pair:
            processor.enabled = True
    return True


def instrumentor_tracer(options: dict[str, Any]) -> trace.Tracer:
    """How each of our instrumentors' `_instrument(**options)` starts: our span processors on the provider in use
    (an `opentelemetry-instrument` run brings its own), capture settings from the environment, a tracer of it."""
    provider = options.get("tracer_provider")
    ensure_span_processors(provider or trace.get_tracer_provider())
    settings.configure_from_environment_once()
    return get_tracer(provider)


def build_exporter(endpoint: str | None = None, protocol: str | None = None) -> SpanExporter | None:
    """The exporter named by `OTEL_TRACES_EXPORTER` (default OTLP over `protocol`), or None for `none`."""
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if kind == "none":
        return None
    if kind == "console":
        return ConsoleSpanExporter()
    if kind != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER={kind!r}: lightning-otel supports otlp, console or none")
    protocol = (
        protocol
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "grpc":
        from lightning_otel.capture.otlp_exporters import otlp_grpc_exporter

        if endpoint is None and not _env_endpoint():
            endpoint = DEFAULT_GRPC_ENDPOINT
        return otlp_grpc_exporter(endpoint)
    if protocol in ("http/protobuf", "http"):
        from lightning_otel.capture.otlp_exporters import otlp_http_exporter

        if endpoint is None and not _env_endpoint():
            endpoint = DEFAULT_HTTP_ENDPOINT
        if endpoint is not None and not endpoint.rstrip("/").endswith("/v1/traces"):
            # Like OTEL_EXPORTER_OTLP_ENDPOINT: a base URL gets the signal path appended.
            endpoint = endpoint.rstrip("/") + "/v1/traces"
        return otlp_http_exporter(endpoint=endpoint)
    raise ValueError(f"OTLP protocol {protocol!r} is not supported; use one of {', '.join(PROTOCOLS)}")


def _env_endpoint() -> str | None:
    return os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")


def _default_service_name() -> str | None:
    if os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        return None  # Resource.create() reads them
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    program = program.removesuffix(".py")
    return program if program and program not in {"-c", "-m"} else "lightning-otel-agent"


def _install_provider(
    endpoint: str | None,
    protocol: str | None,
    service_name: str | None,
    exporter: SpanExporter | None,
) -> tuple[TracerProvider | None, bool]:
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        _join_existing_provider(current, endpoint, protocol, exporter)
        return current, False
    if not isinstance(current, trace.ProxyTracerProvider):
        logger.warning(
            "lightning-otel: a non-SDK tracer provider (%s) is installed; spans cannot be exported by us",
            type(current).__name__,
        )
        return None, False
    name = service_name or _default_service_name()
    resource = Resource.create({SERVICE_NAME: name} if name else {})
    provider = TracerProvider(resource=resource)
    span_exporter = exporter if exporter is not None else build_exporter(endpoint, protocol)
    if span_exporter is not None:
        provider.add_span_processor(BatchExportProcessor(span_exporter))
    trace.set_tracer_provider(provider)
    return provider, True


def _join_existing_provider(
    provider: TracerProvider, endpoint: str | None, protocol: str | None, exporter: SpanExporter | None
) -> None:
    """Someone installed an SDK provider first (agentops, ADK, opentelemetry-instrument, the user): our spans go
    through its processors. Where the user asked for an endpoint (argument or OTEL_EXPORTER_OTLP_*), our exporter
    is added unless the provider already exports there; where nobody asked, say loudly if nothing reaches OTLP."""
    if exporter is not None:
        provider.add_span_processor(BatchExportProcessor(exporter))
        return
    existing = exporter_endpoints(provider)
    asked = endpoint or _env_endpoint()
    if asked is not None:
        ours = build_exporter(endpoint, protocol)
        target = getattr(ours, "_endpoint", None)
        if ours is None or (existing is not None and target is not None and _same_endpoint(target, existing)):
            return
        provider.add_span_processor(BatchExportProcessor(ours))
        logger.info("lightning-otel: added an OTLP exporter to %s to the tracer provider already installed", target)
        return
    if not existing:
        logger.warning(
            "lightning-otel: a tracer provider (%s.%s) was installed before lightning_otel and %s; spans may never "
            "reach agl-otel-collector. Set OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://127.0.0.1:4318) or pass "
            "instrument(endpoint=...) and lightning-otel adds its own exporter to that provider.",
            type(provider).__module__,
            type(provider).__name__,
            "its exporters cannot be read" if existing is None else "it has no OTLP exporter",
        )


def _same_endpoint(target: str, endpoints: list[str]) -> bool:
    def where(url: str) -> tuple[str | None, int | None, str]:
        parts = urlsplit(url if "://" in url else f"//{url}")
        return parts.hostname, parts.port, parts.path.rstrip("/")

    return where(target) in {where(url) for url in endpoints}


def instrument(
    *,
    endpoint: str | None = None,
    protocol: str | None = None,
    service_name: str | None = None,
    instrumentors: Iterable[str] | None = None,
    capture_content: bool | str | ContentCapture | None = None,
    token_ids: bool | None = None,
    token_id_endpoints: str | None = None,
    tracer_provider: TracerProvider | None = None,
    exporter: SpanExporter | None = None,
) -> Instrumentation:
    """Trace every supported library that is installed (or the named `instrumentors`).

    Args:
        endpoint: OTLP base URL (`http://host:4318` or, with grpc, `http://host:4317`). Default: the
            `OTEL_EXPORTER_OTLP_*` variables, else the local collector.
        protocol: `http/protobuf` (default) or `grpc`.
        service_name: the `service.name` resource attribute (default `OTEL_SERVICE_NAME`, else the program).
        instrumentors: names from `lightning_otel.instrumentors.NAMES`; default all whose library is installed.
            Names listed in `OTEL_PYTHON_DISABLED_INSTRUMENTATIONS` are skipped.
        capture_content: record message content (`True`, or a GenAI mode name); default from the environment.
        token_ids: ask every endpoint for token ids (`AGL_TOKEN_IDS=1`).
        token_id_endpoints: regex of endpoint URLs to ask for token ids (`AGL_TOKEN_ID_ENDPOINTS`).
        tracer_provider: use this provider instead of the global one.
        exporter: export through this exporter instead of OTLP (tests, custom backends).

    Calling it again updates the capture settings and adds instrumentors; the provider is set up once.
    """
    global _state
    with _lock:
        if sdk_disabled():
            logger.info("lightning-otel: OTEL_SDK_DISABLED=true, nothing is instrumented")
            _state = Instrumentation(tracer_provider=None, disabled=True)
            use_provider(None)
            return _state
        settings.configure(capture_content=capture_content, token_ids=token_ids, token_id_endpoints=token_id_endpoints)
        if tracer_provider is not None:
            provider: TracerProvider | None = tracer_provider
            owns = False
            if exporter is not None:
                tracer_provider.add_span_processor(BatchExportProcessor(exporter))
        elif _state is not None and _state.tracer_provider is not None:
            provider, owns = _state.tracer_provider, _state.owns_provider
            if exporter is not None:
                provider.add_span_processor(BatchExportProcessor(exporter))
        else:
            provider, owns = _install_provider(endpoint, protocol, service_name, exporter)
        if provider is not None:
            ensure_span_processors(provider)
            if _state is None and tracer_provider is None and exporter is None:
                _start_event_logs(provider, endpoint, protocol, owns)
        state = Instrumentation(tracer_provider=provider, owns_provider=owns)
        if _state is not None:
            state.instrumentors.update(_state.instrumentors)
        for name in selected_names(instrumentors):
            instance = state.instrumentors.get(name) or load_instrumentor(name)
            if instance is None:
                continue
            if not instance.is_instrumented_by_opentelemetry:
                instance.instrument(tracer_provider=provider, skip_dep_check=True)
            state.instrumentors[name] = instance
        _state = state
        use_provider(provider)
        return state


def _start_event_logs(provider: TracerProvider, endpoint: str | None, protocol: str | None, owns: bool) -> None:
    """The operation-details event as log records where our spans go over OTLP to an endpoint we know (ours, or
    one asked for): `capture.genai_events`."""
    if not genai_events.wanted() or os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() not in ("", "otlp"):
        return
    asked = endpoint or _env_endpoint()
    if asked is None and not owns:
        return  # the user's provider exports wherever it does: the event stays on the span
    if asked is None:
        grpc = (protocol or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "").strip() == "grpc"
        endpoint = DEFAULT_GRPC_ENDPOINT if grpc else DEFAULT_HTTP_ENDPOINT
    genai_events.start(endpoint, protocol, resource=provider.resource)


def uninstrument() -> None:
    """Remove every patch `instrument()` applied and stop stamping spans; the provider stays installed."""
    global _state
    with _lock:
        if _state is None:
            return
        for instance in _state.instrumentors.values():
            if instance.is_instrumented_by_opentelemetry:
                instance.uninstrument()
        for pair in _processors.values():
            for processor in pair:
                processor.enabled = False
        genai_events.stop()
        _state = Instrumentation(tracer_provider=_state.tracer_provider, owns_provider=_state.owns_provider)


def flush(timeout_millis: int = 30_000) -> bool:
    """End the LLM spans still being finished, then force-flush our provider: when this returns, a rollout's
    spans are at the collector (read-your-writes)."""
    drained = finisher.drain(timeout_millis / 1000)  # ends the last spans (and emits their event records)
    drained = genai_events.force_flush(timeout_millis) and drained
    provider = current_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is None:
        return drained
    return bool(force_flush(timeout_millis)) and drained


def current_instrumentation() -> Instrumentation | None:
    return _state


def add_span_processor(processor: SpanProcessor) -> None:
    """Attach a processor (an in-memory capture, a custom exporter) to the provider in use."""
    provider = current_provider()
    if not isinstance(provider, TracerProvider):
        raise RuntimeError("no OpenTelemetry SDK TracerProvider is installed; call lightning_otel.instrument()")
    provider.add_span_processor(processor)
