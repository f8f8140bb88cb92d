"""Which tracer provider our spans go to, and our tracer on it.

`instrument()` records the provider it set up or adopted here; agent spans, rewards and LLM calls take their tracer
from `get_tracer()`. Kept apart from setup so that what setup installs (the agent-tracking processor) can name
agents without importing setup back.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

from lightning_otel.version import __version__

TRACER_NAME = "lightning_otel"

_provider: Any = None
# (provider, our tracer on it): the SDK builds a new Tracer on every `get_tracer` call (a warnings filter, a
# deprecation wrapper, an instrumentation scope: ~50 us), and an agent span, a reward and a rollout each want one.
_last: tuple[Any, trace.Tracer] | None = None


def use_provider(provider: Any) -> None:
    """The provider `instrument()` set up or adopted (None: the global one)."""
    global _provider
    _provider = provider


def current_provider() -> Any:
    """The provider `instrument()` set up, else the global one."""
    return _provider if _provider is not None else trace.get_tracer_provider()


def get_tracer(tracer_provider: Any = None) -> trace.Tracer:
    """Our tracer on `tracer_provider`, else on the provider `instrument()` set up, else the global one."""
    global _last
    provider = tracer_provider if tracer_provider is not None else current_provider()
    last = _last
    if last is not None and last[0] is provider:
        return last[1]
    tracer = trace.get_tracer(TRACER_NAME, __version__, provider)
    _last = (provider, tracer)
    return tracer
