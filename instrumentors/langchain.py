"""LangChain / LangGraph instrumentation: agent and tool spans from a global callback handler, no code change.

Usage:

    from lightning_otel.instrumentors.langchain import LangChainInstrumentor
    LangChainInstrumentor().instrument()           # or `import lightning_otel.auto`

LangChain has no OpenTelemetry of its own. A callback handler registered globally (LangChain's configure hook,
the way LangSmith's tracer is installed, never a callback the user has to pass) sees every run and opens:

- `invoke_agent {name}` for an agent: a graph built with `create_agent(name=...)` (its `lc_agent_name`), or a
  node of a LangGraph graph that is not inside another agent, named after the node (so a hand-built
  write/check/rewrite graph has three agents, and a supervisor graph's `supervisor` node and sub-agents are
  agents while their inner `model`/`tools` steps are not). `AGL_LANGGRAPH_NODE_AGENTS=0` turns node agents off;
  nodes named `tools` or `__...__` never are agents;
- `execute_tool {name}` for each tool run.

LLM calls are recorded once, by the OpenAI client (or LiteLLM) instrumentor underneath `ChatOpenAI`, with the
mirrored span of the current run as parent (through `lightning_otel.capture.framework_context`): callbacks
cannot attach an OpenTelemetry context, so nothing is attached or detached from them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection
from contextvars import ContextVar
from dataclasses import dataclass
from types import ModuleType
from typing import Any
from uuid import UUID

from opentelemetry import context, trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.trace import SpanKind, Status, StatusCode

from lightning_otel import semconv
from lightning_otel.capture.framework_context import register_parent_source, unregister_parent_source
from lightning_otel.capture.setup import instrumentor_tracer
from lightning_otel.instrumentors.import_hooks import when_imported

_instruments = ("langchain-core >= 0.3",)
NODE_AGENTS_ENV = "AGL_LANGGRAPH_NODE_AGENTS"
_NOT_AGENT_NODES = frozenset({"tools"})


@dataclass(slots=True)
class _Run:
    parent: UUID | None
    agent: str | None  # the agent this run belongs to (its own, or inherited)
    span: trace.Span | None  # mirrored span, None for runs we only pass through
    ctx: context.Context  # the context children start in (keeps the root's baggage: rollout identity)


class RunMirror:
    """Run id -> mirrored span; turns LangChain callbacks into agent and tool spans."""

    def __init__(self, tracer: trace.Tracer, *, node_agents: bool) -> None:
        self.tracer = tracer
        self.node_agents = node_agents
        self.enabled = True
        self._runs: dict[UUID, _Run] = {}
        self._lock = threading.Lock()

    def _parent(self, parent_run_id: UUID | None) -> tuple[_Run | None, context.Context]:
        with self._lock:
            parent = self._runs.get(parent_run_id) if parent_run_id is not None else None
        return parent, parent.ctx if parent is not None else context.get_current()

    def _agent_of(self, name: str | None, metadata: dict[str, Any], parent: _Run | None) -> str | None:
        """The agent this new run starts, or None when it starts none."""
        inherited = parent.agent if parent is not None else None
        named = metadata.get("lc_agent_name")
        if named and named != inherited:
            return str(named)
        node = metadata.get("langgraph_node")
        if (
            self.node_agents
            and node
            and name == node
            and inherited is None  # inside an agent (create_agent, a node agent) the nodes are its steps
            and not named
            and node not in _NOT_AGENT_NODES
            and not str(node).startswith("__")
        ):
            return str(node)
        return None

    def start(
        self, run_id: UUID, parent_run_id: UUID | None, span_name: str | None, attributes: dict[str, Any]
    ) -> None:
        parent, ctx = self._parent(parent_run_id)
        agent = attributes.get(semconv.GEN_AI_AGENT_NAME) or (parent.agent if parent is not None else None)
        span = None
        if span_name is not None and self.enabled:
            span = self.tracer.start_span(span_name, context=ctx, kind=SpanKind.INTERNAL, attributes=attributes)
            ctx = trace.set_span_in_context(span, ctx)
        with self._lock:
            self._runs[run_id] = _Run(parent_run_id, agent, span, ctx)

    def chain_start(self, run_id: UUID, parent_run_id: UUID | None, name: str | None, metadata: dict[str, Any]) -> None:
        parent, _ = self._parent(parent_run_id)
        agent = self._agent_of(name, metadata, parent)
        if agent is None:
            self.start(run_id, parent_run_id, None, {})
            return
        self.start(
            run_id,
            parent_run_id,
            semconv.agent_span_name(agent),
            {semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT, semconv.GEN_AI_AGENT_NAME: agent},
        )

    def end(self, run_id: UUID, error: BaseException | None = None) -> None:
        with self._lock:
            run = self._runs.pop(run_id, None)
        if run is None or run.span is None:
            return
        if error is not None:
            run.span.record_exception(error)
            run.span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        run.span.end()

    def parent_context(self) -> context.Context | None:
        """For an LLM span starting now: the mirrored span nearest to the current LangChain run."""
        if not self.enabled or not self._runs:
            return None
        from langchain_core.runnables.config import var_child_runnable_config

        config = var_child_runnable_config.get()
        manager = config.get("callbacks") if config else None
        run_id = getattr(manager, "parent_run_id", None)
        with self._lock:
            while run_id is not None:
                run = self._runs.get(run_id)
                if run is None:
                    return None
                if run.span is not None:
                    return trace.set_span_in_context(run.span, context.get_current())
                run_id = run.parent
        return None


def _handler_class() -> type:
    from langchain_core.callbacks import BaseCallbackHandler

    class OpenTelemetryCallbackHandler(BaseCallbackHandler):
        """Registered globally; cheap and thread-safe, so LangChain runs it inline even for async runs."""

        run_inline = True
        raise_error = False

        def __init__(self, mirror: RunMirror) -> None:
            self.mirror = mirror

        def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                           metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:  # fmt: skip
            name = kwargs.get("name") or (serialized or {}).get("name")
            self.mirror.chain_start(run_id, parent_run_id, name, metadata or {})

        def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
            self.mirror.end(run_id)

        def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
            control_flow = type(error).__name__ in ("GraphBubbleUp", "GraphInterrupt", "ParentCommand")
            self.mirror.end(run_id, None if control_flow else error)  # LangGraph interrupts/handoffs raise these

        def on_tool_start(self, serialized: Any, input_str: str, *, run_id: UUID, parent_run_id: UUID | None = None,
                          **kwargs: Any) -> None:  # fmt: skip
            name = str(kwargs.get("name") or (serialized or {}).get("name") or "tool")
            attributes = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: name}
            inputs = kwargs.get("inputs")
            tool_call_id = inputs.get("tool_call_id") if isinstance(inputs, dict) else None
            if tool_call_id:
                attributes[semconv.GEN_AI_TOOL_CALL_ID] = str(tool_call_id)
            self.mirror.start(run_id, parent_run_id, semconv.tool_span_name(name), attributes)

        def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
            self.mirror.end(run_id)

        def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
            self.mirror.end(run_id, error)

        # Model runs are passed through (the client layer records the call); they must be in the map so an LLM
        # call inside one finds its agent.
        def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID,
                                parent_run_id: UUID | None = None, **kwargs: Any) -> None:  # fmt: skip
            self.mirror.start(run_id, parent_run_id, None, {})

        def on_llm_start(self, serialized: Any, prompts: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                         **kwargs: Any) -> None:  # fmt: skip
            self.mirror.start(run_id, parent_run_id, None, {})

        def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
            self.mirror.end(run_id)

        def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
            self.mirror.end(run_id)

    return OpenTelemetryCallbackHandler


# LangChain adds the value of this variable to every callback manager it configures; the default makes it global
# (threads and tasks included) without setting anything per context.
_HANDLER: ContextVar[Any] = ContextVar("agl_langchain_handler", default=None)


class LangChainInstrumentor(BaseInstrumentor):
    def __init__(self) -> None:
        super().__init__()
        self._mirror: RunMirror | None = None
        self._token: Any = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        node_agents = os.environ.get(NODE_AGENTS_ENV, "1").lower() not in ("0", "false", "no")
        self._mirror = RunMirror(instrumentor_tracer(kwargs), node_agents=node_agents)
        register_parent_source(self._mirror.parent_context)
        when_imported("langchain_core.tracers.context", self._register)

    def _register(self, module: ModuleType) -> None:
        global _HANDLER
        if self._mirror is None:
            return
        handler = _handler_class()(self._mirror)
        _HANDLER = ContextVar("agl_langchain_handler", default=handler)
        module.register_configure_hook(_HANDLER, True)

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._mirror is not None:
            unregister_parent_source(self._mirror.parent_context)
            self._mirror.enabled = False  # LangChain has no call to remove a configure hook; ours goes inert
            self._mirror = None
