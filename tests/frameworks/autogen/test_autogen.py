"""AutoGen agentchat: its native invoke_agent/execute_tool spans kept, one LLM span per call under the agent that
made it with the server's token ids, rollout ids on every span, no behaviour change."""

from __future__ import annotations

import logging

import pytest

import lightning_otel
from lightning_otel.testing import OpenAITestServer, SpanCapture
from tests.frameworks.autogen import programs
from tests.frameworks.span_tree import ancestors, assert_llm_spans_match_server, by_id, uninstrumented


async def test_round_robin_writer_and_critic(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture, caplog: pytest.LogCaptureFixture
) -> None:
    openai_test_server.set_replies(programs.REVIEW_REPLIES)
    with caplog.at_level(logging.ERROR), lightning_otel.rollout_context("ro-review", "at-1"):
        messages = await programs.run_review(openai_test_server.base_url)
    assert messages[1:] == programs.REVIEW_REPLIES
    assert_llm_spans_match_server(agl_spans, openai_test_server, ["writer", "critic", "writer", "critic"])
    assert {s.attributes.get("agl.rollout.id") for s in agl_spans.spans} == {"ro-review"}
    agent_spans = [s for s in agl_spans.spans if s.name.startswith("invoke_agent ")]
    assert sorted({s.name for s in agent_spans}) == ["invoke_agent critic", "invoke_agent writer"]
    assert "Failed to detach context" not in caplog.text


async def test_swarm_hands_off_to_an_agent_with_a_tool(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture
) -> None:
    openai_test_server.set_replies(programs.SWARM_REPLIES)
    with lightning_otel.rollout_context("ro-swarm", "at-1"):
        answer = await programs.run_swarm(openai_test_server.base_url)
    assert answer == "It is sunny in Paris. TERMINATE"
    assert_llm_spans_match_server(agl_spans, openai_test_server, ["triage", "weather", "weather"])
    spans = by_id(agl_spans)
    (tool,) = agl_spans.named("execute_tool get_weather")
    assert ancestors(tool, spans)[0] == "invoke_agent weather"
    (handoff,) = agl_spans.named("execute_tool transfer_to_weather")
    assert ancestors(handoff, spans)[0] == "invoke_agent triage"
    assert {s.attributes.get("agl.rollout.id") for s in agl_spans.spans} == {"ro-swarm"}


async def test_uninstrumented_runs_give_the_same_outputs(openai_test_server: OpenAITestServer) -> None:
    async def run_both() -> list[object]:
        openai_test_server.set_replies(programs.REVIEW_REPLIES + programs.SWARM_REPLIES)
        return [
            await programs.run_review(openai_test_server.base_url),
            await programs.run_swarm(openai_test_server.base_url),
        ]

    instrumented = await run_both()
    with uninstrumented():
        plain = await run_both()
    assert plain == instrumented
    assert instrumented[1] == "It is sunny in Paris. TERMINATE"
