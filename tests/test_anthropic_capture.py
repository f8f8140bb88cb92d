"""The Anthropic SDK captured like OpenAI's client (instrumentors/anthropic.py): one span per model request, sync,
async and streamed (`stream=True` and `messages.stream(...)`), with the agent and rollout it was made in, its
response id, stop reason and usage, and with content on its messages (the system prompt, tool_use and tool_result
blocks); count_tokens is no call; uninstrument restores the SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import pytest

import lightning_otel
from lightning_otel import semconv
from lightning_otel.capture.settings import settings
from lightning_otel.serving.gateway import GatewayServer
from lightning_otel.testing import OpenAITestServer, Reply, SpanCapture, ToolCall

RUN_SQL = {"name": "run_sql", "description": "Run SQL.", "input_schema": {"type": "object"}}


def ours(capture: SpanCapture) -> list:
    """The spans of our Anthropic instrumentor (not the gateway's, not the SDK's own OpenTelemetry)."""
    return [s for s in capture.llm_spans() if s.attributes.get(semconv.GEN_AI_PROVIDER_NAME) == "anthropic"
            and s.instrumentation_scope.name.startswith("lightning_otel")]  # fmt: skip


@pytest.fixture
def agent(replica_gateway: GatewayServer) -> Iterator[anthropic.Anthropic]:
    base = lightning_otel.ProxyLLM(replica_gateway.base_url, "policy").get_base_url("ro-1", "at-1")
    settings.configure(capture_content="SPAN_ONLY")
    try:
        yield anthropic.Anthropic(base_url=base.removesuffix("/v1"), api_key="-", max_retries=0)
    finally:
        settings.configure(capture_content=False)


def test_a_tool_round_trip_is_two_spans_with_agent_rollout_and_messages(
    chat_replica: OpenAITestServer, agent: anthropic.Anthropic, agl_spans: SpanCapture
) -> None:
    chat_replica.set_replies([Reply(tool_calls=[ToolCall("run_sql", '{"query": "SELECT 12"}')]), "Twelve."])
    question = [{"role": "user", "content": "How many orders?"}]
    with lightning_otel.rollout_context("ro-1", "at-1"), lightning_otel.agent("analyst"):
        plan = agent.messages.create(
            model="claude", max_tokens=32, system="Use SQL.", messages=question, tools=[RUN_SQL]
        )
        (use,) = [block for block in plan.content if block.type == "tool_use"]
        result = [{"type": "tool_result", "tool_use_id": use.id, "content": "12"}]
        again = [*question, {"role": "assistant", "content": plan.content}, {"role": "user", "content": result}]
        answer = agent.messages.create(model="claude", max_tokens=32, tools=[RUN_SQL], messages=again)
    lightning_otel.flush()
    first, second = sorted(ours(agl_spans), key=lambda s: s.start_time)
    for span, message in ((first, plan), (second, answer)):
        attributes = span.attributes
        assert (
            attributes[semconv.GEN_AI_RESPONSE_ID] == message.id and attributes[semconv.GEN_AI_AGENT_NAME] == "analyst"
        )
        assert (attributes["agl.rollout.id"], attributes["agl.attempt.id"]) == ("ro-1", "at-1")
        assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == message.usage.output_tokens
        assert list(attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS]) == [message.stop_reason]
    system = json.loads(first.attributes[semconv.GEN_AI_INPUT_MESSAGES])[0]
    assert system == {"role": "system", "parts": [{"type": "text", "content": "Use SQL."}]}
    (called,) = json.loads(first.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"]
    assert (called["type"], called["name"], json.loads(called["arguments"])) == ("tool_call", "run_sql",
                                                                                 {"query": "SELECT 12"})  # fmt: skip
    asked = json.loads(second.attributes[semconv.GEN_AI_INPUT_MESSAGES])
    assert (
        asked[0] == {"role": "system", "parts": [{"type": "text", "content": "Use SQL."}]} or asked[0]["role"] == "user"
    )
    assert {"type": "tool_call_response", "id": use.id, "response": "12"} in asked[-1]["parts"]


def test_streams_and_the_async_client_are_captured_and_count_tokens_is_no_call(
    chat_replica: OpenAITestServer, agent: anthropic.Anthropic, replica_gateway: GatewayServer, agl_spans: SpanCapture
) -> None:
    chat_replica.set_replies(["Twelve orders.", "Nine orders.", "Seven."])
    question = [{"role": "user", "content": "How many orders?"}]
    with lightning_otel.agent("streamer"):
        with agent.messages.stream(model="claude", max_tokens=32, messages=question) as stream:
            text = "".join(stream.text_stream)
        events = list(agent.messages.create(model="claude", max_tokens=32, messages=question, stream=True))
        agent.messages.count_tokens(model="claude", messages=question)

    async def call_async() -> str:
        client = anthropic.AsyncAnthropic(base_url=str(agent.base_url), api_key="-", max_retries=0)
        message = await client.messages.create(model="claude", max_tokens=32, messages=question)
        return message.content[0].text

    import asyncio

    assert text == "Twelve orders." and events[-1].type == "message_stop"
    assert asyncio.run(call_async()) == "Seven."
    lightning_otel.flush()
    spans = sorted(ours(agl_spans), key=lambda s: s.start_time)
    assert len(spans) == 3  # two streams and the async call; counting tokens made none
    for span, said in zip(spans, ("Twelve orders.", "Nine orders.", "Seven."), strict=True):
        output = json.loads(span.attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]
        assert output["parts"] == [{"type": "text", "content": said}] and output["finish_reason"] == "end_turn"
        assert span.attributes[semconv.GEN_AI_RESPONSE_ID] in chat_replica.served
    assert [s.attributes.get(semconv.GEN_AI_AGENT_NAME) for s in spans] == ["streamer", "streamer", None]


def test_uninstrument_restores_the_sdk(agl_spans: SpanCapture) -> None:
    from anthropic import _base_client

    assert hasattr(_base_client.SyncAPIClient.request, "__wrapped__")  # the session instrumented it
    lightning_otel.uninstrument()
    try:
        assert not hasattr(_base_client.SyncAPIClient.request, "__wrapped__")
        assert not hasattr(_base_client.AsyncAPIClient.request, "__wrapped__")
    finally:
        lightning_otel.instrument()
    assert hasattr(_base_client.SyncAPIClient.request, "__wrapped__")
