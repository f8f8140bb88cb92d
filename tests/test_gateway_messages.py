"""Anthropic's Messages API through the policy gateway, called with the Anthropic SDK as an agent calls it: answered
as a Message, its span holding the ids the replica rendered and sampled; tool_use and tool_result round trips;
the SDK's streaming; the async client; errors in the dialect's own shape."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest

import lightning_otel
from lightning_otel import semconv
from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.serving.gateway import GatewayServer, PolicyGateway
from lightning_otel.testing import OpenAITestServer, Reply, SpanCapture, ToolCall
from tests.helpers import assert_span_has_the_replicas_ids, dialect_spans

QUESTION = [{"role": "user", "content": "How many orders were placed in 2024?"}]
RUN_SQL = {
    "name": "run_sql",
    "description": "Run a SQL query on the orders database.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}


def base_url(gateway: GatewayServer, rollout: tuple[str, str] = ("ro-1", "at-1")) -> str:
    """What an agent is handed (a ProxyLLM's rollout URL), as the Anthropic SDK's base URL (it adds /v1/messages)."""
    return lightning_otel.ProxyLLM(gateway.base_url, "policy").get_base_url(*rollout).removesuffix("/v1")


def client(gateway: GatewayServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url(gateway), api_key="unused", max_retries=0)


def test_a_message_is_answered_and_its_span_holds_the_ids_the_replica_rendered_and_sampled(
    chat_replica: OpenAITestServer, replica_gateway: GatewayServer, agl_spans: SpanCapture
) -> None:
    chat_replica.set_replies(["Twelve orders."])
    with lightning_otel.agent("analyst"):
        message = client(replica_gateway).messages.create(
            model="claude", max_tokens=64, system="You answer from the database.", messages=QUESTION
        )
    lightning_otel.flush()
    assert [block.text for block in message.content] == ["Twelve orders."] and message.stop_reason == "end_turn"
    (span,) = dialect_spans(agl_spans)
    assert_span_has_the_replicas_ids(span, chat_replica, message.id, "anthropic.messages")
    assert (span.attributes["agl.rollout.id"], span.attributes["agl.attempt.id"]) == ("ro-1", "at-1")
    served = chat_replica.served[message.id]
    assert (message.usage.input_tokens, message.usage.output_tokens) == (
        len(served.prompt_token_ids), len(served.response_token_ids[0]))  # fmt: skip
    sent = chat_replica.requests[-1].body  # what the replica was asked: the chat form of the same conversation
    assert sent["messages"] == [{"role": "system", "content": "You answer from the database."}, *QUESTION]
    assert sent["max_tokens"] == 64 and sent["return_token_ids"] is True
    # The client's spans (ours, from the Anthropic instrumentor; and the SDK's own OpenTelemetry, on by default,
    # wherever a global tracer provider is set) name the same response: joined to the gateway's by that id, one
    # sample with the replica's ids and the agent the SDK was called in.
    clients = [other for other in agl_spans.llm_spans() if other is not span]
    ours = [s for s in clients if s.instrumentation_scope.name.startswith("lightning_otel")]
    assert len(ours) == 1 and all(s.attributes[semconv.GEN_AI_RESPONSE_ID] == message.id for s in clients)
    assert ours[0].attributes[semconv.GEN_AI_AGENT_NAME] == "analyst"
    assert ours[0].attributes[semconv.GEN_AI_PROVIDER_NAME] == "anthropic"
    flat = [{"spanId": f"{s.context.span_id:016x}", "startTimeUnixNano": s.start_time, "name": s.name,
             "attributes": dict(s.attributes)} for s in (*clients, span)]  # fmt: skip
    (triplet,) = TraceToTriplet(agent_match="^analyst$").adapt(flat).triplets
    assert triplet.agent_name == "analyst"
    assert (triplet.prompt_token_ids, triplet.response_token_ids) == (
        served.prompt_token_ids, served.response_token_ids[0])  # fmt: skip


def test_tool_use_and_its_result_round_trip_and_each_call_keeps_its_ids(
    chat_replica: OpenAITestServer, replica_gateway: GatewayServer, agl_spans: SpanCapture
) -> None:
    chat_replica.set_replies([Reply(tool_calls=[ToolCall("run_sql", '{"query": "SELECT COUNT(*) FROM orders"}')]),
                         "Twelve orders."])  # fmt: skip
    agent = client(replica_gateway)
    first = agent.messages.create(model="claude", max_tokens=64, messages=QUESTION, tools=[RUN_SQL],
                                  tool_choice={"type": "any"})  # fmt: skip
    (use,) = first.content
    assert (use.type, use.name, use.input) == ("tool_use", "run_sql", {"query": "SELECT COUNT(*) FROM orders"})
    assert first.stop_reason == "tool_use"
    asked = chat_replica.requests[-1].body
    assert asked["tool_choice"] == "required"
    function = {"name": "run_sql", "parameters": RUN_SQL["input_schema"], "description": RUN_SQL["description"]}
    assert asked["tools"] == [{"type": "function", "function": function}]
    result = [{"type": "tool_result", "tool_use_id": use.id, "content": [{"type": "text", "text": "12"}]}]
    second = agent.messages.create(model="claude", max_tokens=64, tools=[RUN_SQL],
                                   messages=[*QUESTION, {"role": "assistant", "content": first.content},
                                             {"role": "user", "content": result}])  # fmt: skip
    assert second.content[0].text == "Twelve orders."
    sent = chat_replica.requests[-1].body["messages"]
    assert sent[1]["tool_calls"] == [{"id": use.id, "type": "function", "function": {
        "name": "run_sql", "arguments": '{"query": "SELECT COUNT(*) FROM orders"}'}}]  # fmt: skip
    assert sent[2] == {"role": "tool", "tool_call_id": use.id, "content": "12"}
    lightning_otel.flush()
    spans = dialect_spans(agl_spans)
    assert len(spans) == 2
    for span, message in zip(spans, (first, second), strict=True):
        assert_span_has_the_replicas_ids(span, chat_replica, message.id, "anthropic.messages")


def test_the_sdks_stream_reads_the_same_message_text_and_tool_input(
    chat_replica: OpenAITestServer, replica_gateway: GatewayServer, agl_spans: SpanCapture
) -> None:
    chat_replica.set_replies(["Twelve orders were placed.",
                         Reply(tool_calls=[ToolCall("run_sql", '{"query": "SELECT 1"}')])])  # fmt: skip
    agent = client(replica_gateway)
    with agent.messages.stream(model="claude", max_tokens=64, messages=QUESTION) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Twelve orders were placed." and final.content[0].text == text
    with agent.messages.stream(model="claude", max_tokens=64, messages=QUESTION, tools=[RUN_SQL]) as stream:
        tool = stream.get_final_message()
    assert tool.content[0].input == {"query": "SELECT 1"} and tool.stop_reason == "tool_use"
    lightning_otel.flush()
    for span, message in zip(dialect_spans(agl_spans), (final, tool), strict=True):
        assert_span_has_the_replicas_ids(span, chat_replica, message.id, "anthropic.messages")


async def test_the_async_client(
    chat_replica: OpenAITestServer, replica_gateway: GatewayServer, agl_spans: SpanCapture
) -> None:
    chat_replica.set_replies(["Twelve."])
    async with anthropic.AsyncAnthropic(base_url=base_url(replica_gateway), api_key="unused", max_retries=0) as agent:
        message = await agent.messages.create(model="claude", max_tokens=16, messages=QUESTION)
    lightning_otel.flush()
    (span,) = dialect_spans(agl_spans)
    assert message.content[0].text == "Twelve."
    assert_span_has_the_replicas_ids(span, chat_replica, message.id, "anthropic.messages")


def test_errors_come_in_the_dialects_shape_and_the_gateway_keeps_serving(
    chat_replica: OpenAITestServer, replica_gateway: GatewayServer, agl_spans: SpanCapture
) -> None:
    agent = client(replica_gateway)
    image = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]
    with pytest.raises(anthropic.BadRequestError, match="'image' block in a user message is not spoken here"):
        agent.messages.create(model="claude", max_tokens=16, messages=[{"role": "user", "content": image}])
    url = f"{base_url(replica_gateway)}/v1/messages"
    for body, said in ((b"{not json", "invalid request"), (b'{"model": "claude", "messages": []}', "messages"),
                       (b'{"model": "c", "messages": [{"role": "user", "content": "hi"}]}', "max_tokens")):  # fmt: skip
        answer = httpx.post(url, content=body, timeout=10)
        assert answer.status_code == 400, answer.text
        assert answer.json()["type"] == "error" and answer.json()["error"]["type"] == "invalid_request_error"
        assert said in answer.json()["error"]["message"]
    dead = GatewayServer(PolicyGateway(["http://127.0.0.1:9/v1"]))
    with dead, pytest.raises(anthropic.InternalServerError, match="unreachable"):
        client(dead).messages.create(model="claude", max_tokens=16, messages=QUESTION)
    chat_replica.set_replies(["Still here."])
    assert agent.messages.create(model="claude", max_tokens=16, messages=QUESTION).content[0].text == "Still here."


def test_an_anthropic_sdk_agents_sub_agent_is_selected_by_name_in_a_dry_run_through_runners(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The SDK records nothing with token ids in a runner; the gateway does, under the traceparent of the agent the
    request was made in. `agent_match` on a sub-agent's name selects exactly its calls, with the replica's ids."""
    from lightning_otel.testing import runtime_agents

    def model(body: dict[str, Any]) -> str | Reply:  # a tool call first, then an answer from its result
        answered = any(message["role"] == "tool" for message in body["messages"])
        return "There were 12." if answered else Reply(tool_calls=[ToolCall("run_sql", '{"query": "SELECT 1"}')])

    with OpenAITestServer(model) as replica:
        trainer = lightning_otel.Trainer(
            n_runners=1, adapter={"agent_match": "^writer$"}, progress=False,
            initial_resources={"main_llm": lightning_otel.LLM(replica.base_url, "policy")},
        )  # fmt: skip
        (batch,) = trainer.dev(runtime_agents.anthropic_sdk_agent, [{"question": "Orders in 2024?"}] * 2,
                               gateway=True, print_spans=False).train  # fmt: skip
    triplets = batch.triplets()
    assert len(triplets) == 2 and {t.agent_name for t in triplets} == {"writer"}
    for triplet in triplets:
        (response_id,) = triplet.response_ids
        served = replica.served[response_id]
        assert (triplet.prompt_token_ids, triplet.response_token_ids) == (
            served.prompt_token_ids, served.response_token_ids[0])  # fmt: skip
    assert all(adapted.diagnostics.agents_seen == ["planner", "writer"] for adapted in batch.adapted.values())
    assert batch.rewards() and all(reward == 1.0 for reward in batch.rewards().values())


def test_count_tokens_is_the_replicas_own_count_and_records_no_call(
    chat_replica: OpenAITestServer, replica_gateway: GatewayServer, agl_spans: SpanCapture
) -> None:
    answer = [{"type": "thinking", "thinking": "hidden", "signature": "x"}, {"type": "text", "text": "Twelve."}]
    between = {"role": "system", "content": "The working folder is empty."}  # as Claude Code sends its environment
    conversation = [*QUESTION, {"role": "assistant", "content": answer}, between,
                    {"role": "user", "content": "And in 2023?"}]  # fmt: skip
    counted = client(replica_gateway).messages.count_tokens(model="claude", system="Be brief.", messages=conversation)
    rendered = chat_replica.tokenizer.encode_chat([
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION[0]["content"]},
        {"role": "assistant", "content": "Twelve."}, {"role": "system", "content": "The working folder is empty."},
        {"role": "user", "content": "And in 2023?"}])  # fmt: skip
    assert counted.input_tokens == len(rendered)  # the thinking block left out, the system message in its place
    assert not dialect_spans(agl_spans) and not chat_replica.served  # counting is no call
    assert httpx.post(f"{base_url(replica_gateway)}/v1/messages/count_tokens", content=b"[]").status_code == 400


def test_a_prompt_over_the_context_is_anthropics_prompt_is_too_long() -> None:
    small = OpenAITestServer(context_length=24)
    with small, GatewayServer(PolicyGateway([small.base_url])) as gateway:
        long = [{"role": "user", "content": "count " * 40}]
        with pytest.raises(anthropic.BadRequestError, match=r"prompt is too long: \d+ tokens > 24 maximum"):
            client(gateway).messages.create(model="claude", max_tokens=4, messages=long)
        short = [{"role": "user", "content": "hi"}]
        with pytest.raises(anthropic.BadRequestError, match=r"input length and `max_tokens` exceed context limit"):
            client(gateway).messages.create(model="claude", max_tokens=20, messages=short)
