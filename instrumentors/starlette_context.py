"""Agent services join the rollout with no code change: a Starlette or FastAPI app runs each request in the context
its `traceparent`/`baggage` headers carry (what `RolloutContextMiddleware` does, applied by `lightning-otel-run`).

The trainer's `HttpAgent` sends those headers; with them attached, the service's spans share the rollout's trace
and carry its ids, and its LLM calls forward them. Requests without either header run as before. It creates no
spans (a server span is contrib's opentelemetry-instrumentation-fastapi's business, and works beside this).
Disable with `OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=starlette`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry import context
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from lightning_otel.capture.propagation import extract_context
from lightning_otel.instrumentors.import_hooks import when_imported
from lightning_otel.instrumentors.patches import Patches

# Starlette.__call__(scope, receive, send) has been the ASGI entry since 0.x; FastAPI's calls it through super().
_instruments = ("starlette >= 0.20",)
_CARRIED = (b"traceparent", b"baggage")


def _run_in_caller_context(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    scope = args[0] if args else kwargs.get("scope")
    if not isinstance(scope, dict) or scope.get("type") not in ("http", "websocket"):
        return wrapped(*args, **kwargs)
    headers = {key.lower(): value for key, value in scope.get("headers") or () if key.lower() in _CARRIED}
    if not headers:
        return wrapped(*args, **kwargs)
    carried = extract_context({key.decode("latin-1"): value.decode("latin-1") for key, value in headers.items()})

    async def in_context() -> Any:
        token = context.attach(carried)  # attached where the request runs: the coroutine, not its creation
        try:
            return await wrapped(*args, **kwargs)
        finally:
            context.detach(token)

    return in_context()


class StarletteContextInstrumentor(BaseInstrumentor):
    def __init__(self) -> None:
        super().__init__()
        self._active = False
        self._patches = Patches()

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        self._active = True
        when_imported("starlette.applications", self._patch)

    def _patch(self, applications: Any) -> None:
        if self._active:
            self._patches.wrap(applications, "Starlette.__call__", _run_in_caller_context)

    def _uninstrument(self, **kwargs: Any) -> None:
        self._active = False
        self._patches.unwrap_all()
