"""OpenAI's Responses API through the policy gateway, called with the OpenAI SDK as a harness calls it (Codex speaks
it): answered as a Response, its span holding the ids the replica rendered and sampled; function calls and their
outputs round trip; the SDK's stream; the async client; errors the SDK raises as its own."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

import lightning_otel
from lightning_otel.serving.gateway import GatewayServer, PolicyGateway
from lightning_otel.testing import OpenAITestServer, Reply, SpanCapture, ToolCall
from tests.helpers import assert_span_has_the_replicas_ids, dialect_spans

RUN_SQL = {
    "type": "function",
    "name": "run_sql",
    "description": "Run a SQL query on the orders database.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}


def base_url(gateway: GatewayServer) -> str:
    return lightning_otel.ProxyLLM(gateway.base_url, "policy").get_base_url("ro-1", "at-1")


def test_a_response_is_answered_and_its_span_holds_the_replicas_ids(
    chat_replica: OpenAITestServer, replica_gateway: GatewayServer, agl_spans: SpanCapture
) -> None:
    chat_replica.set_replies(["Twelve orders."])
    client = openai.OpenAI(base_url=base_url(replica_gateway), api_key="unused", max_retries=0)
    response = client.responses.create(model="gpt-5-codex", instructions="Answer from the database.",
                                       input="How many orders in 2024?", max_output_tokens=64)  # fmt: skip
    lightning_otel.flush()
    assert response.output_text == "Twelve orders." and response.status == "completed"
    (span,) = dialect_spans(agl_spans)
    assert_span_has_the_replicas_ids(span, chat_replica, response.id, "openai.responses")
    served = chat_replica.served[response.id]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (
        len(served.prompt_token_ids), len(served.response_token_ids[0]))  # fmt: skip
    sent = chat_replica.requests[-1].body
    assert sent["messages"] == [{"role": "system", "content": "Answer from the database."},
                                {"role": "user", "content": "How many orders in 2024?"}]  # fmt: skip
    assert sent["max_tokens"] == 64


def test_function_calls_and_their_outputs_round_trip(
    chat_replica: OpenAITestServer, replica_gateway: GatewayServer, agl_spans: SpanCapture
) -> None:
    chat_replica.set_replies([Reply(tool_calls=[ToolCall("run_sql", '{"query": "SELECT 1"}')]), "One."])
    client = openai.OpenAI(base_url=base_url(replica_gateway), api_key="unused", max_retries=0)
    conversation: list[Any] = [{"role": "user", "content": [{"type": "input_text", "text": "Count them."}]}]
    first = client.responses.create(model="m", input=conversation, tools=[RUN_SQL], tool_choice="required")
    (call,) = first.output
    assert (call.type, call.name, call.arguments) == ("function_call", "run_sql", '{"query": "SELECT 1"}')
    assert chat_replica.requests[-1].body["tool_choice"] == "required"
    conversation += [call.model_dump(exclude_none=True), {"type": "function_call_output", "call_id": call.call_id,
                                                          "output": "1"}]  # fmt: skip
    second = client.responses.create(model="m", input=conversation, tools=[RUN_SQL])
    assert second.output_text == "One."
    sent = chat_replica.requests[-1].body["messages"]
    arguments = '{"query": "SELECT 1"}'
    called = {"id": call.call_id, "type": "function", "function": {"name": "run_sql", "arguments": arguments}}
    assert sent[1] == {"role": "assistant", "content": None, "tool_calls": [called]}
    assert sent[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "1"}
    lightning_otel.flush()
    for span, response in zip(dialect_spans(agl_spans), (first, second), strict=True):
        assert_span_has_the_replicas_ids(span, chat_replica, response.id, "openai.responses")


def test_the_sdks_stream_and_the_async_client(
    chat_replica: OpenAITestServer, replica_gateway: GatewayServer, agl_spans: SpanCapture
) -> None:
    chat_replica.set_replies(["Streamed answer.", Reply(tool_calls=[ToolCall("run_sql", '{"query": "SELECT 2"}')])])
    client = openai.OpenAI(base_url=base_url(replica_gateway), api_key="unused", max_retries=0)
    with client.responses.stream(model="m", input="Count them.") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "Streamed answer."
    with client.responses.stream(model="m", input="Count them.", tools=[RUN_SQL]) as stream:
        tool = stream.get_final_response()
    assert tool.output[0].arguments == '{"query": "SELECT 2"}'
    lightning_otel.flush()
    for span, response in zip(dialect_spans(agl_spans), (final, tool), strict=True):
        assert_span_has_the_replicas_ids(span, chat_replica, response.id, "openai.responses")


async def test_the_async_client(
    chat_replica: OpenAITestServer, replica_gateway: GatewayServer, agl_spans: SpanCapture
) -> None:
    chat_replica.set_replies(["Twelve."])
    client = openai.AsyncOpenAI(base_url=base_url(replica_gateway), api_key="unused", max_retries=0)
    response = await client.responses.create(model="m", input="How many?")
    await client.close()
    lightning_otel.flush()
    (span,) = dialect_spans(agl_spans)
    assert response.output_text == "Twelve."
    assert_span_has_the_replicas_ids(span, chat_replica, response.id, "openai.responses")


def test_what_is_not_spoken_is_a_400_the_sdk_raises_and_the_gateway_keeps_serving(
    chat_replica: OpenAITestServer, replica_gateway: GatewayServer
) -> None:
    client = openai.OpenAI(base_url=base_url(replica_gateway), api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model="m", input="more", previous_response_id="resp_1")
    with pytest.raises(openai.BadRequestError, match="only function tools"):
        client.responses.create(model="m", input="edit", tools=[{"type": "custom", "name": "apply_patch"}])
    with pytest.raises(openai.BadRequestError, match="input_image"):
        client.responses.create(model="m", input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}])  # fmt: skip
    bad = httpx.post(f"{base_url(replica_gateway)}/responses", content=b"{not json", timeout=10)
    assert bad.status_code == 400 and "invalid request" in bad.json()["error"]["message"]
    chat_replica.set_replies(["Still here."])
    assert client.responses.create(model="m", input="hi").output_text == "Still here."


def test_codexs_tools_a_namespace_of_functions_and_a_hosted_search_are_read_as_a_replica_can_serve_them(
    chat_replica: OpenAITestServer, replica_gateway: GatewayServer
) -> None:
    spawn = {"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}
    tools = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
             {"type": "namespace", "name": "multi_agent_v1", "description": "sub-agents", "tools": [spawn]},
             {"type": "web_search", "external_web_access": False}]  # fmt: skip
    chat_replica.set_replies([Reply(tool_calls=[ToolCall("spawn_agent", '{"message": "look"}')])])
    answer = httpx.post(f"{base_url(replica_gateway)}/responses", json={"model": "m", "input": "go", "tools": tools},
                        timeout=30).json()  # fmt: skip
    (call,) = answer["output"]
    assert (call["type"], call["name"], call["namespace"]) == ("function_call", "spawn_agent", "multi_agent_v1")
    asked = chat_replica.requests[-1].body["tools"]
    assert [tool["function"]["name"] for tool in asked] == ["exec_command", "spawn_agent"]  # no web_search: hosted


def test_a_prompt_over_the_context_is_openais_context_length_exceeded() -> None:
    small = OpenAITestServer(context_length=24)
    with small, GatewayServer(PolicyGateway([small.base_url])) as gateway:
        agent = openai.OpenAI(base_url=base_url(gateway), api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError) as raised:
            agent.responses.create(model="m", input="count " * 40, max_output_tokens=4)
    assert raised.value.code == "context_length_exceeded"
