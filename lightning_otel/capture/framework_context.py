"""Parents for LLM spans from frameworks that keep their own span stack instead of OpenTelemetry's.

The OpenAI Agents SDK tracks its current agent/tool span in its own context variable. Its instrumentor mirrors
those spans into OpenTelemetry and registers a source here; an LLM span starting inside takes the mirrored span as
parent (and so the agent name), with no OpenTelemetry context attached or detached from framework callbacks, which
is what produces "Failed to detach context" errors when a framework starts and ends spans in different tasks.
"""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry import context

ParentSource = Callable[[], "context.Context | None"]
_sources: list[ParentSource] = []


def register_parent_source(source: ParentSource) -> None:
    if source not in _sources:
        _sources.append(source)


def unregister_parent_source(source: ParentSource) -> None:
    if source in _sources:
        _sources.remove(source)


def framework_parent_context() -> context.Context | None:
    """The context an LLM span starting now should use as parent, when a framework knows better than the current
    OpenTelemetry context; None otherwise (the common case, one list check)."""
    for source in _sources:
        found = source()
        if found is not None:
            return found
    return None
