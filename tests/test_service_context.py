"""An agent service joins the caller's rollout with no code change: with the `starlette` instrumentor (what
`lightning-otel-run` loads), a Starlette or FastAPI app runs each request in the context of its `traceparent` and
`baggage` headers, async and sync (thread pool) endpoints alike, and uninstrumenting restores the app."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

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


def _service() -> FastAPI:
    app = FastAPI()

    @app.post("/chat")
    async def chat() -> dict[str, str | None]:
        return _seen()

    @app.post("/sync")
    def sync_chat() -> dict[str, str | None]:  # runs in Starlette's thread pool
        return _seen()

    return app


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


@pytest.mark.parametrize("path", ["/chat", "/sync"])
def test_requests_run_in_the_callers_rollout(service: str, path: str) -> None:
    instrumentor = StarletteContextInstrumentor()
    instrumentor.instrument()
    try:
        seen, trace_id = _call_from_a_rollout(service + path)
        assert seen == {"rollout_id": "ro-7", "attempt_id": "at-2", "parent_trace_id": trace_id}
        # a request without the headers runs outside any rollout, as before
        assert httpx.post(service + path).json() == {"rollout_id": None, "attempt_id": None, "parent_trace_id": None}
    finally:
        instrumentor.uninstrument()
    seen, _ = _call_from_a_rollout(service + path)
    assert seen["rollout_id"] is None  # uninstrumented: the app is as it was
