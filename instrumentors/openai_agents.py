"""OpenAI Agents SDK instrumentation: its agent, tool and handoff spans mirrored into OpenTelemetry.

Usage:

    from lightning_otel.instrumentors.openai_agents import OpenAIAgentsInstrumentor
    OpenAIAgentsInstrumentor().instrument()        # or `import lightning_otel.auto`

The SDK has its own tracing (not OpenTelemetry). A `TracingProcessor` registered with it turns each agent span
into `invoke_agent {Agent.name}` (handoffs included: each agent that runs gets its own span), each function tool
into `execute_tool {name}`, handoffs into `handoff {from} -> {to}` and guardrails into `guardrail {name}`, with the
SDK's nesting. LLM calls are recorded once, by the OpenAI client instrumentor, under the agent that made them: the
SDK's generation/response spans are not mirrored, and the LLM span takes the mirrored span of the SDK's current
span as parent (see `lightning_otel.capture.framework_context`), so no context is attached from SDK callbacks.

The SDK's own upload of traces to OpenAI is replaced by this processor while instrumented (set
`AGL_OPENAI_AGENTS_VENDOR_TRACING=1` to keep it as well). For vLLM-style servers use the Chat Completions model
(`agents.set_default_openai_api("chat_completions")` or `OpenAIChatCompletionsModel`); both models are traced.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from opentelemetry import context, trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.trace import SpanKind, Status, StatusCode

from lightning_otel import semconv
from lightning_otel.capture.conventions import turn_span_name
from lightning_otel.capture.framework_context import register_parent_source, unregister_parent_source
from lightning_otel.capture.settings import settings
from lightning_otel.capture.setup import instrumentor_tracer
from lightning_otel.instrumentors.import_hooks import when_imported

_instruments = ("openai-agents >= 0.3",)
VENDOR_TRACING_ENV = "AGL_OPENAI_AGENTS_VENDOR_TRACING"


@dataclass(slots=True)
class _Mirror:
    otel: trace.Span | None  # None: an SDK span we do not mirror (generation, response, turn...): use the parent's
    parent_key: str | None


def _span_for(data: Any) -> tuple[str, dict[str, Any]] | None:
    """(OTel span name, attributes) for an SDK span we mirror, None for the others."""
    kind = getattr(data, "type", None)
    if kind == "agent":
        return semconv.agent_span_name(data.name), {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
            semconv.GEN_AI_AGENT_NAME: data.name,
        }
    if kind == "function":
        return semconv.tool_span_name(data.name), {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL,
            semconv.GEN_AI_TOOL_NAME: data.name,
        }
    if kind == "handoff":
        source, target = data.from_agent or "?", data.to_agent or "?"
        return f"handoff {source} -> {target}", {
            "openai_agents.handoff.from": source,
            "openai_agents.handoff.to": target,
        }
    if kind == "guardrail":
        return f"guardrail {data.name}", {"openai_agents.guardrail.triggered": bool(data.triggered)}
    if kind == "custom":
        return str(data.name), {}
    return None


class AgentsSpanMirror:
    """The SDK `TracingProcessor` (duck-typed, so importing this module does not import the SDK)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self.enabled = True
        self._mirrors: dict[str, _Mirror] = {}
        self._lock = threading.Lock()

    # --- TracingProcessor --------------------------------------------------------------------------------------
    def on_trace_start(self, sdk_trace: Any) -> None:
        if not self.enabled:
            return
        # The workflow span: children nest under it; started in the caller's context (rollout baggage, user spans).
        # With the latest GenAI conventions opted in, the runner's entry point is a conversation turn.
        name = str(getattr(sdk_trace, "name", "Agent workflow"))
        if settings.latest_genai:
            attributes = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_HANDLE_CONVERSATION_TURN,
                          semconv.GEN_AI_INVOCATION_IS_NESTED: False, semconv.GEN_AI_WORKFLOW_NAME: name}  # fmt: skip
            span = self.tracer.start_span(turn_span_name(name), kind=SpanKind.INTERNAL, attributes=attributes)
        else:
            span = self.tracer.start_span(name, kind=SpanKind.INTERNAL)
        with self._lock:
            self._mirrors[sdk_trace.trace_id] = _Mirror(span, None)

    def on_trace_end(self, sdk_trace: Any) -> None:
        with self._lock:
            mirror = self._mirrors.pop(sdk_trace.trace_id, None)
        if mirror is not None and mirror.otel is not None:
            mirror.otel.end()

    def on_span_start(self, span: Any) -> None:
        if not self.enabled:
            return
        parent_key = span.parent_id or span.trace_id
        described = _span_for(span.span_data)
        otel = None
        if described is not None:
            name, attributes = described
            if settings.latest_genai and attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_INVOKE_AGENT:
                attributes = {**attributes, semconv.GEN_AI_INVOCATION_IS_NESTED: True}  # inside the turn
            otel = self.tracer.start_span(
                name, context=self._context_of(parent_key), kind=SpanKind.INTERNAL, attributes=attributes
            )
        with self._lock:
            self._mirrors[span.span_id] = _Mirror(otel, parent_key)

    def on_span_end(self, span: Any) -> None:
        with self._lock:
            mirror = self._mirrors.pop(span.span_id, None)
        if mirror is None or mirror.otel is None:
            return
        error = getattr(span, "error", None)
        if error:
            message = error.get("message") if isinstance(error, dict) else str(error)
            mirror.otel.set_status(Status(StatusCode.ERROR, str(message)))
        data = span.span_data
        if getattr(data, "type", None) == "handoff":  # the target is known only once the handoff happened
            name, attributes = _span_for(data) or ("handoff", {})
            mirror.otel.update_name(name)
            mirror.otel.set_attributes(attributes)
        if getattr(data, "type", None) == "agent" and getattr(data, "handoffs", None):
            mirror.otel.set_attribute("openai_agents.handoffs", [str(h) for h in data.handoffs])
        mirror.otel.end()

    def shutdown(self) -> None:
        self.enabled = False

    def force_flush(self) -> None:
        return None

    # --- parents -----------------------------------------------------------------------------------------------
    def _nearest(self, key: str | None) -> trace.Span | None:
        with self._lock:
            while key is not None:
                mirror = self._mirrors.get(key)
                if mirror is None:
                    return None
                if mirror.otel is not None:
                    return mirror.otel
                key = mirror.parent_key
        return None

    def _context_of(self, key: str | None) -> context.Context | None:
        parent = self._nearest(key)
        return trace.set_span_in_context(parent) if parent is not None else None

    def parent_context(self) -> context.Context | None:
        """For an LLM span starting now: the mirrored span of the SDK's current span, unless an OpenTelemetry span
        started inside it is current (then the current context is right as it is)."""
        if not self.enabled or not self._mirrors:
            return None
        from agents.tracing import get_current_span, get_current_trace

        current = get_current_span()
        key = current.span_id if current is not None else None
        if key is None:
            current_trace = get_current_trace()
            key = current_trace.trace_id if current_trace is not None else None
        mirrored = self._nearest(key)
        if mirrored is None:
            return None
        active = trace.get_current_span()
        started = getattr(active, "start_time", None)
        if active.get_span_context().is_valid and started is not None and started > (mirrored.start_time or 0):  # type: ignore[attr-defined]
            return None  # a span the user (or another instrumentor) opened inside the SDK span is closer
        return trace.set_span_in_context(mirrored)


class OpenAIAgentsInstrumentor(BaseInstrumentor):
    def __init__(self) -> None:
        super().__init__()
        self._mirror: AgentsSpanMirror | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        self._mirror = AgentsSpanMirror(instrumentor_tracer(kwargs))
        register_parent_source(self._mirror.parent_context)
        when_imported("agents", self._register)

    def _register(self, agents: ModuleType) -> None:
        mirror = self._mirror
        if mirror is None or not hasattr(agents, "set_trace_processors"):  # another package named `agents`
            return
        if os.environ.get(VENDOR_TRACING_ENV, "").lower() in ("1", "true", "yes"):
            agents.add_trace_processor(mirror)
        else:
            agents.set_trace_processors([mirror])  # replaces the SDK's upload to OpenAI

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._mirror is not None:
            unregister_parent_source(self._mirror.parent_context)
            self._mirror.enabled = False  # the SDK has no public way to remove one processor; ours goes inert
            self._mirror = None
