"""What every framework lane shares: span ancestry, LLM spans against what the test server produced, and running a
program with the instrumentation off."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry.sdk.trace import ReadableSpan

import lightning_otel
from lightning_otel.testing import OpenAITestServer, SpanCapture


def by_id(capture: SpanCapture) -> dict[int, ReadableSpan]:
    return {span.context.span_id: span for span in capture.spans}


def ancestors(span: ReadableSpan, spans: dict[int, ReadableSpan]) -> list[str]:
    """Names of the span's captured ancestors, nearest first."""
    names = []
    while span.parent is not None and span.parent.span_id in spans:
        span = spans[span.parent.span_id]
        names.append(span.name)
    return names


def assert_llm_spans_match_server(capture: SpanCapture, server: OpenAITestServer, agents: list[str]) -> None:
    """One LLM span per call, in order, named after `agents`, each under its own agent's span (the nearest agent
    ancestor), with exactly the token ids the server produced."""
    llm = sorted(capture.llm_spans(), key=lambda s: s.start_time or 0)
    assert [s.attributes.get("gen_ai.agent.name") for s in llm] == agents
    spans = by_id(capture)
    for span in llm:
        served = server.served[span.attributes["gen_ai.response.id"]]
        assert list(span.attributes["agl.llm.prompt_token_ids"]) == served.prompt_token_ids
        assert list(span.attributes["agl.llm.response_token_ids"]) == served.response_token_ids[0]
        nearest_agent = next(name for name in ancestors(span, spans) if name.startswith("invoke_agent "))
        assert nearest_agent == f"invoke_agent {span.attributes['gen_ai.agent.name']}"


@contextlib.contextmanager
def uninstrumented() -> Iterator[None]:
    """Everything inside runs with lightning_otel off (to compare outputs); on again afterwards."""
    lightning_otel.uninstrument()
    try:
        yield
    finally:
        lightning_otel.instrument()


def flat_spans(capture: SpanCapture) -> list[dict]:
    """The captured spans as the collector hands them to the adapter (flat dicts, hex ids)."""
    return [
        {"spanId": f"{s.context.span_id:016x}", "parentSpanId": f"{s.parent.span_id:016x}" if s.parent else None,
         "name": s.name, "startTimeUnixNano": s.start_time, "endTimeUnixNano": s.end_time,
         "attributes": dict(s.attributes or {})}
        for s in capture.spans
    ]  # fmt: skip
