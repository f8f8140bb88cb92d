"""An agent service joins the caller's rollout with no code change: with the `starlette` instrumentor (what
`lightning-otel-run` loads), a Starlette or FastAPI app runs each request in the context of its `traceparent` and
`baggage` headers, async and sync (thread pool) endpoints alike, mounted apps included, and uninstrumenting restores
the app."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from lightning_otel.capture.propagation import outgoing_headers
from lightning_otel.capture.rollout_context import current_rollout, rollout_context
from lightning_otel.instrumentors.starlette_context import StarletteContextInstrumentor
from lightning_otel.serving.app_server import AppServer


def _seen() -> dict[str, str | None]:
    identity = current_rollout()
    span = trace.get_current_span().get_span_context()
    return {
        "rollout_id": identity.rollout_id if identity else None,
        "attempt_id": identity.attempt_id if identity else None,
        "parent_trace_id": format(span.trace_id, "032x") if span.is_valid else None,
    }


def _service() -> Starlette:
    """A Starlette app with an async endpoint, and a FastAPI app mounted in it with a sync one (thread pool)."""
    api = FastAPI()

    @api.post("/sync")
    def sync_chat() -> dict[str, str | None]:
        return _seen()

    async def chat(request: Request) -> JSONResponse:
        return JSONResponse(_seen())

    return Starlette(routes=[Route("/chat", chat, methods=["POST"]), Mount("/api", api)])


@pytest.fixture
def service() -> Iterator[str]:
    with AppServer(_service()) as server:
        yield server.base_url.removesuffix("/v1")


def _call_from_a_rollout(url: str) -> tuple[dict, str]:
    tracer = TracerProvider().get_tracer("test")
    with rollout_context("ro-7", "at-2"), tracer.start_as_current_span("invoke_agent HttpAgent") as span:
        headers = outgoing_headers()
        trace_id = format(span.get_span_context().trace_id, "032x")
    return httpx.post(url, headers=headers).json(), trace_id


@pytest.mark.parametrize("path", ["/chat", "/api/sync"])
def test_requests_run_in_the_callers_rollout(service: str, path: str) -> None:
    instrumentor = StarletteContextInstrumentor()  # a singleton: instrumented already if the session instrumented
    ours = not instrumentor.is_instrumented_by_opentelemetry
    instrumentor.instrument()
    try:
        seen, trace_id = _call_from_a_rollout(service + path)
        assert seen == {"rollout_id": "ro-7", "attempt_id": "at-2", "parent_trace_id": trace_id}
        # a request without the headers runs outside any rollout, as before (urllib: no instrumentor adds headers;
        # FastAPI's own tracing may open a server span, in a trace of its own)
        with urllib.request.urlopen(urllib.request.Request(service + path, data=b"", method="POST")) as reply:
            plain = json.load(reply)
        assert (plain["rollout_id"], plain["attempt_id"]) == (None, None) and plain["parent_trace_id"] != trace_id
    finally:
        if ours:
            instrumentor.uninstrument()
    if ours and path == "/chat":  # (FastAPI traces itself when a provider is set, extracting the context too)
        seen, _ = _call_from_a_rollout(service + path)
        assert seen["rollout_id"] is None  # uninstrumented: the app is as it was
