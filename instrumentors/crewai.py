"""CrewAI (1.x) instrumentation: `invoke_agent {role}` around each agent's work, `execute_tool {name}` per tool.

Usage:

    from lightning_otel.instrumentors.crewai import CrewAIInstrumentor
    CrewAIInstrumentor().instrument()              # or `import lightning_otel.auto`

CrewAI's own tracing goes to its own providers (and names agents by hash), so it cannot carry our context. We wrap
`Agent.execute_task` / `aexecute_task` (what a crew calls per task) and `Agent.kickoff` / `kickoff_async` (an agent
used on its own) to open a current `invoke_agent {role}` span, and `BaseTool.run` / `arun` (and the `@tool` class)
for `execute_tool {name}`. The LLM calls are recorded once by the OpenAI client instrumentor (CrewAI's native
OpenAI-compatible provider) or the LiteLLM one, under the agent's span, so they carry its role as agent name.

While instrumented, CrewAI's anonymous telemetry and its trace upload to the CrewAI platform are off
(`CREWAI_DISABLE_TELEMETRY=true`, `CREWAI_TRACING_ENABLED=false`, unless you set them yourself; set
`AGL_CREWAI_VENDOR_TELEMETRY=1` to leave CrewAI's defaults alone).
"""

from __future__ import annotations

import contextvars
import functools
import os
from collections.abc import Callable, Collection
from types import ModuleType
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.trace import SpanKind

from lightning_otel import semconv
from lightning_otel.capture.setup import instrumentor_tracer
from lightning_otel.instrumentors.import_hooks import when_imported
from lightning_otel.instrumentors.patches import Patches

_instruments = ("crewai >= 1.0",)
VENDOR_TELEMETRY_ENV = "AGL_CREWAI_VENDOR_TELEMETRY"
# The agent whose span is open: `kickoff` runs a crew that calls `execute_task` on the same agent (one span, not two).
_open_agent: contextvars.ContextVar[object | None] = contextvars.ContextVar("agl_crewai_agent", default=None)


def _agent_attributes(agent: Any) -> tuple[str, dict[str, Any]]:
    role = str(getattr(agent, "role", None) or type(agent).__name__)
    attributes: dict[str, Any] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
        semconv.GEN_AI_AGENT_NAME: role,
    }
    agent_id = getattr(agent, "id", None)
    if agent_id is not None:
        attributes[semconv.GEN_AI_AGENT_ID] = str(agent_id)
    return role, attributes


def _tool_attributes(tool: Any) -> tuple[str, dict[str, Any]]:
    name = str(getattr(tool, "name", None) or type(tool).__name__)
    return name, {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: name}


def _sync_wrapper(tracer: trace.Tracer, agent: bool) -> Callable[..., Any]:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if agent and _open_agent.get() is instance:
            return wrapped(*args, **kwargs)
        name, attributes = _agent_attributes(instance) if agent else _tool_attributes(instance)
        span_name = semconv.agent_span_name(name) if agent else semconv.tool_span_name(name)
        token = _open_agent.set(instance) if agent else None
        try:
            with tracer.start_as_current_span(span_name, kind=SpanKind.INTERNAL, attributes=attributes):
                return wrapped(*args, **kwargs)
        finally:
            if token is not None:
                _open_agent.reset(token)

    return wrapper


def _async_wrapper(tracer: trace.Tracer, agent: bool) -> Callable[..., Any]:
    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if agent and _open_agent.get() is instance:
            return await wrapped(*args, **kwargs)
        name, attributes = _agent_attributes(instance) if agent else _tool_attributes(instance)
        span_name = semconv.agent_span_name(name) if agent else semconv.tool_span_name(name)
        token = _open_agent.set(instance) if agent else None
        try:
            with tracer.start_as_current_span(span_name, kind=SpanKind.INTERNAL, attributes=attributes):
                return await wrapped(*args, **kwargs)
        finally:
            if token is not None:
                _open_agent.reset(token)

    return wrapper


# (module, attribute, async?, is an agent?)
_TARGETS = (
    ("crewai.agent.core", "Agent.execute_task", False, True),
    ("crewai.agent.core", "Agent.aexecute_task", True, True),
    ("crewai.agent.core", "Agent.kickoff", False, True),
    ("crewai.agent.core", "Agent.kickoff_async", True, True),
    ("crewai.tools.base_tool", "BaseTool.run", False, False),
    ("crewai.tools.base_tool", "BaseTool.arun", True, False),
    ("crewai.tools.base_tool", "Tool.run", False, False),
    ("crewai.tools.base_tool", "Tool.arun", True, False),
)


class CrewAIInstrumentor(BaseInstrumentor):
    def __init__(self) -> None:
        super().__init__()
        self._tracer: trace.Tracer | None = None
        self._patches = Patches()

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        self._tracer = instrumentor_tracer(kwargs)
        if os.environ.get(VENDOR_TELEMETRY_ENV, "").lower() not in ("1", "true", "yes"):
            os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
            os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
        for module_name in dict.fromkeys(module for module, *_ in _TARGETS):
            when_imported(module_name, functools.partial(self._patch, module_name))

    def _patch(self, module_name: str, module: ModuleType) -> None:
        # By the name we asked for: crewai.agent.core's `__name__` is not "crewai.agent.core" (CrewAI rebinds it).
        if self._tracer is None:
            return
        for target_module, attribute, is_async, agent in _TARGETS:
            if target_module != module_name:
                continue
            make = _async_wrapper if is_async else _sync_wrapper
            self._patches.wrap(module, attribute, make(self._tracer, agent))

    def _uninstrument(self, **kwargs: Any) -> None:
        self._tracer = None
        self._patches.unwrap_all()
