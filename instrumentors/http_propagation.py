"""Carry the rollout identity on outgoing HTTP: `traceparent` + `baggage` on httpx and requests calls, and, inside a
rollout, the calling agent's name (`x-agl-agent-name`): the policy gateway routes a call to its agent's policy
before any span of the caller has reached the collector.

Usage: on by default with `lightning_otel.instrument()`; disable with
`OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=http_propagation`. Headers are added only inside a rollout or a recording
span, and never replace headers the caller set. It creates no spans.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Collection
from typing import Any

from opentelemetry import baggage, trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from lightning_otel.capture.propagation import inject_caller
from lightning_otel.instrumentors.import_hooks import when_imported
from lightning_otel.instrumentors.patches import Patches

_instruments = ("httpx >= 0.23",)


def _headers_to_add(existing: Any) -> dict[str, str]:
    if not baggage.get_all() and not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    inject_caller(carrier)
    return {key: value for key, value in carrier.items() if key not in existing}


def _inject_httpx(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    request = args[0] if args else kwargs.get("request")
    if request is not None:
        for key, value in _headers_to_add(request.headers).items():
            request.headers[key] = value
    return wrapped(*args, **kwargs)


def _inject_requests(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    request = args[0] if args else kwargs.get("request")
    if request is not None:
        request.headers.update(_headers_to_add(request.headers))
    return wrapped(*args, **kwargs)


class HTTPPropagationInstrumentor(BaseInstrumentor):
    def __init__(self) -> None:
        super().__init__()
        self._active = False
        self._patches = Patches()

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        self._active = True
        when_imported("httpx", self._patch_httpx)
        if importlib.util.find_spec("requests") is not None:
            when_imported("requests", self._patch_requests)

    def _patch_httpx(self, httpx: Any) -> None:
        if not self._active:
            return
        # AsyncClient.send is a coroutine function; the header edit happens before it is awaited.
        self._patches.wrap(httpx, "Client.send", _inject_httpx)
        self._patches.wrap(httpx, "AsyncClient.send", _inject_httpx)

    def _patch_requests(self, requests: Any) -> None:
        if self._active:
            self._patches.wrap(requests.sessions, "Session.send", _inject_requests)

    def _uninstrument(self, **kwargs: Any) -> None:
        self._active = False
        self._patches.unwrap_all()
