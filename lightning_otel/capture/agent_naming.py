"""Which agent an LLM call belongs to, decided when the LLM span starts (DESIGN.md section 3).

Resolution order:
1. an explicit name set by `lightning_otel.agent(...)` or by one of our framework patches;
2. sources registered by framework instrumentors (LangChain's runnable config: `lc_agent_name`, else the
   enclosing LangGraph node);
3. the nearest ancestor span that is an agent span (`gen_ai.agent.name`, or a name `invoke_agent X`),
   looked up in a span_id -> agent map kept by `AgentSpanTracker`; no tree walk happens at training time.

`agent(name)` is the way in for plain-Python agents:

    @lightning_otel.agent("writer")
    def write(task): ...

    with lightning_otel.agent("checker"):
        check(draft)
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from opentelemetry import context, trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from lightning_otel import semconv
from lightning_otel.capture.tracer import get_tracer

_AGENT_NAME_KEY = context.create_key("agl-agent-name")

AgentNameSource = Callable[[], "str | None"]
_name_sources: list[AgentNameSource] = []
_F = TypeVar("_F", bound=Callable[..., Any])


def context_with_agent(name: str, ctx: context.Context | None = None) -> context.Context:
    """Return `ctx` (default: current) carrying an explicit agent name for LLM calls started under it."""
    return context.set_value(_AGENT_NAME_KEY, name, ctx)


def register_agent_name_source(source: AgentNameSource) -> None:
    """Let a framework instrumentor contribute agent names (tried after explicit names, before ancestry)."""
    if source not in _name_sources:
        _name_sources.append(source)


def unregister_agent_name_source(source: AgentNameSource) -> None:
    if source in _name_sources:
        _name_sources.remove(source)


class AgentSpanTracker:
    """span_id -> agent name for live spans, so the nearest agent ancestor is one dict lookup away."""

    def __init__(self) -> None:
        self._agents: dict[int, str] = {}

    def on_start(self, span: Span) -> None:
        agent = agent_name_of_span(span)
        if agent is None:
            parent = span.parent
            if parent is None:
                return
            agent = self._agents.get(parent.span_id)
            if agent is None:
                return
        self._agents[span.context.span_id] = agent

    def on_end(self, span: ReadableSpan) -> None:
        self._agents.pop(span.context.span_id, None)

    def agent_of(self, span_id: int) -> str | None:
        return self._agents.get(span_id)

    def __len__(self) -> int:
        return len(self._agents)


tracker = AgentSpanTracker()


def agent_name_of_span(span: ReadableSpan) -> str | None:
    """The agent a span *is* (not inherits): ADK sets the attribute after start, so the name counts too."""
    attributes = span.attributes
    name = attributes.get(semconv.GEN_AI_AGENT_NAME) if attributes else None
    if name is not None and (
        span.name.startswith(semconv.AGENT_SPAN_PREFIX)
        or (attributes and attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_INVOKE_AGENT)
    ):
        return str(name)
    if span.name.startswith(semconv.AGENT_SPAN_PREFIX):
        return span.name[len(semconv.AGENT_SPAN_PREFIX) :] or None
    return None


def resolve_agent_name(ctx: context.Context | None = None) -> str | None:
    """The agent name for an LLM span about to start in `ctx` (default: current context)."""
    explicit = context.get_value(_AGENT_NAME_KEY, ctx)
    if explicit is not None:
        return str(explicit)
    for source in _name_sources:
        name = source()
        if name:
            return name
    parent = trace.get_current_span(ctx).get_span_context()
    if parent.is_valid:
        return tracker.agent_of(parent.span_id)
    return None


class AgentTrackingProcessor(SpanProcessor):
    """Feeds `tracker`; installed by `instrument()` next to the rollout stamping."""

    def __init__(self) -> None:
        self.enabled = True

    def on_start(self, span: Span, parent_context: context.Context | None = None) -> None:
        if self.enabled:
            tracker.on_start(span)

    def on_end(self, span: ReadableSpan) -> None:
        tracker.on_end(span)


class agent:
    """Name a plain-Python agent: opens an `invoke_agent {name}` span and names every LLM call inside it.

    Works as a sync or async context manager and as a decorator of sync or async functions.
    """

    def __init__(self, name: str, *, agent_id: str | None = None) -> None:
        if not name:
            raise ValueError("agent() needs a non-empty name")
        self.name = name
        self.agent_id = agent_id
        # Per task/thread: one module-level `agent("writer")` may be entered by many rollouts at once.
        self._active: contextvars.ContextVar[tuple[trace.Span, object, Any] | None] = contextvars.ContextVar(
            f"agl-agent-{name}", default=None
        )

    def _open(self) -> tuple[trace.Span, object]:
        attributes: dict[str, str] = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
            semconv.GEN_AI_AGENT_NAME: self.name,
        }
        if self.agent_id:
            attributes[semconv.GEN_AI_AGENT_ID] = self.agent_id
        span = get_tracer().start_span(semconv.agent_span_name(self.name), attributes=attributes)
        ctx = context_with_agent(self.name, trace.set_span_in_context(span))
        return span, context.attach(ctx)

    @staticmethod
    def _close(span: trace.Span, token: object, exc: BaseException | None) -> None:
        context.detach(token)  # type: ignore[arg-type]
        if exc is not None:
            span.record_exception(exc)
            span.set_status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
            span.set_attribute(semconv.ERROR_TYPE, type(exc).__qualname__)
        span.end()

    def __enter__(self) -> trace.Span:
        span, token = self._open()
        self._active.set((span, token, self._active.get()))
        return span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        active = self._active.get()
        if active is None:
            raise RuntimeError(f"agent({self.name!r}) exited without being entered in this task")
        span, token, previous = active
        self._active.set(previous)
        self._close(span, token, exc)

    async def __aenter__(self) -> trace.Span:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, func: _F) -> _F:
        # A decorator opens a fresh span per call, so concurrent calls never share the context manager state.
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                span, token = self._open()
                try:
                    result = await func(*args, **kwargs)
                except BaseException as exc:
                    self._close(span, token, exc)
                    raise
                self._close(span, token, None)
                return result

            return run_async  # type: ignore[return-value]

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            span, token = self._open()
            try:
                result = func(*args, **kwargs)
            except BaseException as exc:
                self._close(span, token, exc)
                raise
            self._close(span, token, None)
            return result

        return run  # type: ignore[return-value]
