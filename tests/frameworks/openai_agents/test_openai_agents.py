"""OpenAI Agents SDK: agent, tool and handoff spans; one LLM span per call under its agent with the server's ids."""

from __future__ import annotations

import logging

import pytest
from openai import AsyncOpenAI

import lightning_otel
from lightning_otel.testing import OpenAITestServer, SpanCapture
from tests.frameworks.openai_agents import programs
from tests.frameworks.span_tree import ancestors, assert_llm_spans_match_server, by_id, uninstrumented


def client(server: OpenAITestServer) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)


@pytest.mark.parametrize("streamed", [False, True])
async def test_triage_hands_off_to_a_specialist_with_a_tool(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture, streamed: bool, caplog: pytest.LogCaptureFixture
) -> None:
    openai_test_server.set_replies(programs.TRIAGE_REPLIES)
    with caplog.at_level(logging.ERROR), lightning_otel.rollout_context("ro-triage", "at-1"):
        output = await programs.run_triage(client(openai_test_server), streamed=streamed)
    assert output == "It is sunny in Paris."
    assert_llm_spans_match_server(agl_spans, openai_test_server, ["triage", "weather", "weather"])
    names = [s.name for s in sorted(agl_spans.spans, key=lambda s: s.start_time)]
    for expected in (
        "invoke_agent triage",
        "invoke_agent weather",
        "execute_tool get_weather",
        "handoff triage -> weather",
    ):
        assert expected in names
    tool = agl_spans.named("execute_tool get_weather")[0]
    assert "invoke_agent weather" in ancestors(tool, by_id(agl_spans))
    assert {s.attributes.get("agl.rollout.id") for s in agl_spans.spans} == {"ro-triage"}
    assert "Failed to detach context" not in caplog.text


async def test_a_manager_calls_agents_as_tools(openai_test_server: OpenAITestServer, agl_spans: SpanCapture) -> None:
    openai_test_server.set_replies(programs.MANAGER_REPLIES)
    output = await programs.run_manager(client(openai_test_server))
    assert output == "In Spanish: buenos dias"
    assert_llm_spans_match_server(agl_spans, openai_test_server, ["manager", "spanish", "manager"])
    spanish = agl_spans.named("invoke_agent spanish")[0]
    assert ancestors(spanish, by_id(agl_spans))[:2] == ["execute_tool translate_to_spanish", "invoke_agent manager"]


async def test_the_responses_model_is_traced_too(openai_test_server: OpenAITestServer, agl_spans: SpanCapture) -> None:
    openai_test_server.set_replies(["Paris is sunny."])
    agent = programs.Agent(
        name="solo", instructions="Answer.", model=programs.model(client(openai_test_server), "responses")
    )
    result = await programs.Runner.run(agent, "Weather in Paris?")
    assert result.final_output == "Paris is sunny."
    (llm,) = agl_spans.llm_spans()
    assert llm.attributes["gen_ai.agent.name"] == "solo"
    assert "invoke_agent solo" in ancestors(llm, by_id(agl_spans))


async def test_uninstrumented_runs_give_the_same_outputs(openai_test_server: OpenAITestServer) -> None:
    from lightning_otel.instrumentors.openai_agents import OpenAIAgentsInstrumentor

    openai_test_server.set_replies(programs.TRIAGE_REPLIES + programs.MANAGER_REPLIES)
    instrumented = [
        await programs.run_triage(client(openai_test_server)),
        await programs.run_manager(client(openai_test_server)),
    ]
    with uninstrumented():
        openai_test_server.set_replies(programs.TRIAGE_REPLIES + programs.MANAGER_REPLIES)
        plain = [
            await programs.run_triage(client(openai_test_server)),
            await programs.run_manager(client(openai_test_server)),
        ]
    assert plain == instrumented == ["It is sunny in Paris.", "In Spanish: buenos dias"]
    assert OpenAIAgentsInstrumentor  # the instrumentor is importable without side effects


async def test_a_stream_broken_off_early_leaves_no_context_errors(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture, caplog: pytest.LogCaptureFixture
) -> None:
    openai_test_server.set_replies(programs.TRIAGE_REPLIES)
    with caplog.at_level(logging.DEBUG), lightning_otel.rollout_context("ro-break", "at-1"):
        stream = programs.Runner.run_streamed(programs.triage_agents(client(openai_test_server)), "Weather in Paris?")
        async for _ in stream.stream_events():
            break  # the caller stops reading after the first event
        stream.cancel()
    lightning_otel.flush()
    assert "Failed to detach context" not in caplog.text
    assert all(s.attributes.get("agl.rollout.id") == "ro-break" for s in agl_spans.spans)


async def test_the_latest_genai_conventions_name_the_run_a_conversation_turn_and_train_the_same(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_otel.adapters.triplets import TraceToTriplet
    from lightning_otel.capture.settings import settings
    from tests.frameworks.span_tree import flat_spans

    samples = {}
    turn_operation = "handle_conversation_turn"
    for opted_in in (False, True):  # OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental, as instrument() reads it
        monkeypatch.setattr(settings, "latest_genai", opted_in)
        agl_spans.clear()
        openai_test_server.set_replies(programs.TRIAGE_REPLIES)
        with lightning_otel.rollout_context(f"ro-semconv-{opted_in}", "at-1"):
            assert await programs.run_triage(client(openai_test_server)) == "It is sunny in Paris."
        lightning_otel.flush()
        turns = agl_spans.where(lambda s: (s.attributes or {}).get("gen_ai.operation.name") == turn_operation)
        if opted_in:
            (turn,) = turns
            assert turn.name == "handle_conversation_turn Agent workflow"
            assert turn.attributes["gen_ai.invocation.is_nested"] is False
            agents = agl_spans.where(lambda s: s.name.startswith("invoke_agent "))
            assert agents and all(s.attributes["gen_ai.invocation.is_nested"] is True for s in agents)
        else:
            assert not turns and agl_spans.named("Agent workflow")
        adapted = TraceToTriplet(agent_match="triage|weather").adapt(flat_spans(agl_spans))
        samples[opted_in] = [(t.agent_name, t.prompt_token_ids, t.response_token_ids) for t in adapted.triplets]
    assert len(samples[True]) == 3 and samples[True] == samples[False]  # the adapter reads both: the same samples


async def test_with_the_latest_conventions_an_image_the_agent_sends_is_a_generic_part(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK sends an `input_image` as chat's `image_url` block: no GenAI part type fits it, so the latest
    conventions record it as a generic part (#584), where the older names leave it out; the text stays a text part."""
    import json

    from agents import Agent, Runner

    from lightning_otel.capture.settings import ContentCapture, settings

    monkeypatch.setattr(settings, "content", ContentCapture.SPAN_ONLY)  # message content on the spans
    pixel = "data:image/png;base64,iVBORw0KGgo="  # the server does not look at it
    picture = {"type": "input_image", "image_url": pixel, "detail": "low"}
    question = [{"role": "user", "content": [{"type": "input_text", "text": "What is in this picture?"}, picture]}]
    parts = {}
    for opted_in in (False, True):
        monkeypatch.setattr(settings, "latest_genai", opted_in)
        agl_spans.clear()
        openai_test_server.set_replies(["A single pixel."])
        viewer = Agent(
            name="viewer",
            instructions="Describe pictures.",
            model=programs.model(client(openai_test_server), "chat_completions"),
        )
        with lightning_otel.rollout_context(f"ro-image-{opted_in}", "at-1"):
            result = await Runner.run(viewer, question)
        lightning_otel.flush()
        assert result.final_output == "A single pixel."
        (call,) = agl_spans.where(lambda s: (s.attributes or {}).get("gen_ai.operation.name") == "chat")
        messages = json.loads(call.attributes["gen_ai.input.messages"])
        parts[opted_in] = next(m["parts"] for m in messages if m["role"] == "user")
    assert parts[False] == [{"type": "text", "content": "What is in this picture?"}]
    generic = [p for p in parts[True] if p["type"] == "generic"]
    assert generic == [{"type": "generic", "generic_type": "image_url", "image_url": {"url": pixel, "detail": "low"}}]
    assert {"type": "text", "content": "What is in this picture?"} in parts[True]
