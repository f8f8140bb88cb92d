"""Rollout identity across processes: W3C `traceparent` + `baggage` out, and back in on agent servers.

Outgoing: our OpenAI instrumentor adds the headers to LLM requests, and the `http_propagation` instrumentor to
httpx and requests calls made inside a rollout. For anything else, `outgoing_headers()` gives them.

Incoming, for an agent served over HTTP:

    app.add_middleware(lightning_otel.RolloutContextMiddleware)       # FastAPI / Starlette (any ASGI app)

    with lightning_otel.incoming_context(request.headers):            # anything else
        handle(request)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

from opentelemetry import baggage, context, propagate
from opentelemetry.baggage.propagation import W3CBaggagePropagator

from lightning_otel import semconv
from lightning_otel.capture.agent_naming import resolve_agent_name
from lightning_otel.capture.otel_internals import composite_parts
from lightning_otel.capture.rollout_context import current_rollout

_BAGGAGE = W3CBaggagePropagator()
# Baggage entries -> `baggage` header. The W3C propagator validates and percent-encodes every entry on every
# request; a rollout's baggage is the same for all its LLM calls, so it is encoded once.
_baggage_headers: dict[tuple[tuple[str, object], ...], str] = {}
_MAX_CACHED_BAGGAGES = 256


def outgoing_headers(ctx: context.Context | None = None) -> dict[str, str]:
    """`traceparent`/`tracestate`/`baggage` headers for the current (or given) context."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=ctx)
    return carrier


def inject_current(carrier: dict[str, str]) -> None:
    """`propagate.inject(carrier)` for the current context, with the W3C baggage header cached per distinct
    baggage when the global propagator is a composite holding the standard baggage propagator."""
    textmap = propagate.get_global_textmap()
    parts = composite_parts(textmap)
    if parts is None:
        textmap.inject(carrier)
        return
    for part in parts:
        if type(part) is W3CBaggagePropagator:
            _inject_baggage(part, carrier)
        else:
            part.inject(carrier)


def inject_caller(carrier: dict[str, str]) -> None:
    """`inject_current(carrier)`, and inside a rollout the calling agent's name (`x-agl-agent-name`): the policy
    gateway routes a call to its agent's policy before any span of the caller has reached the collector. Added
    where the LLM client builds its request, so it does not depend on which HTTP library the client sends with
    (openai 3.x sends with httpx2, which the `http_propagation` instrumentor does not wrap)."""
    inject_current(carrier)
    if current_rollout() is not None and (agent := resolve_agent_name()):
        carrier[semconv.AGENT_NAME_HEADER] = agent


def _inject_baggage(propagator: W3CBaggagePropagator, carrier: dict[str, str]) -> None:
    entries = baggage.get_all()
    if not entries:
        return
    try:
        key = tuple(entries.items())
        header = _baggage_headers.get(key)
    except TypeError:  # an unhashable baggage value: no caching
        propagator.inject(carrier)
        return
    if header is None:
        encoded: dict[str, str] = {}
        propagator.inject(encoded)
        header = encoded.get("baggage", "")
        if len(_baggage_headers) >= _MAX_CACHED_BAGGAGES:
            _baggage_headers.clear()
        _baggage_headers[key] = header
    if header:
        carrier["baggage"] = header


def extract_context(headers: Mapping[str, str] | Any) -> context.Context:
    """The context carried by incoming headers: the caller's span as parent, the rollout identity as baggage.

    The baggage propagator runs even when `OTEL_PROPAGATORS` leaves it out: rollout ids must not be lost.
    """
    carrier = {str(k).lower(): str(v) for k, v in dict(headers).items()}
    ctx = propagate.extract(carrier)
    return _BAGGAGE.extract(carrier, context=ctx)


class incoming_context:
    """Attach the context carried by `headers` for the duration of a request (sync or async)."""

    def __init__(self, headers: Mapping[str, str] | Any) -> None:
        self._ctx = extract_context(headers)
        self._token: object | None = None

    def __enter__(self) -> context.Context:
        self._token = context.attach(self._ctx)
        return self._ctx

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._token is not None:
            context.detach(self._token)  # type: ignore[arg-type]
            self._token = None

    async def __aenter__(self) -> context.Context:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)


class RolloutContextMiddleware:
    """ASGI middleware: every request runs in the context its `traceparent`/`baggage` headers carry."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope.get("headers", ())}
        token = context.attach(extract_context(headers))
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)
