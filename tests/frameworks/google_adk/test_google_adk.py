"""Google ADK through LiteLLM: ADK's native spans kept, one `chat` LLM span per call under the ADK agent with the
server's token ids (ADK's generate_content spans are not counted as LLM calls), rollout ids, no behaviour change."""

from __future__ import annotations

import lightning_otel
from lightning_otel.testing import OpenAITestServer, SpanCapture
from tests.frameworks.google_adk import programs
from tests.frameworks.span_tree import ancestors, assert_llm_spans_match_server, by_id, uninstrumented


async def test_coordinator_transfers_to_a_sub_agent_with_a_tool(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture
) -> None:
    openai_test_server.set_replies(programs.COORDINATOR_REPLIES)
    with lightning_otel.rollout_context("ro-adk", "at-1"):
        texts = await programs.run_coordinator(openai_test_server.base_url)
    assert texts == ["It is sunny in Paris."]
    assert_llm_spans_match_server(agl_spans, openai_test_server, ["coordinator", "weather", "weather"])
    spans = by_id(agl_spans)
    (tool,) = agl_spans.named("execute_tool get_weather")
    assert ancestors(tool, spans)[0] == "invoke_agent weather"
    assert len(agl_spans.where(lambda s: s.name.startswith("generate_content"))) == 3  # ADK's own, kept
    assert {s.attributes.get("agl.rollout.id") for s in agl_spans.spans} == {"ro-adk"}


async def test_sequential_writer_then_checker(openai_test_server: OpenAITestServer, agl_spans: SpanCapture) -> None:
    openai_test_server.set_replies(programs.PIPELINE_REPLIES)
    with lightning_otel.rollout_context("ro-seq", "at-1"):
        texts = await programs.run_pipeline(openai_test_server.base_url)
    assert texts == programs.PIPELINE_REPLIES
    assert_llm_spans_match_server(agl_spans, openai_test_server, ["writer", "checker"])
    writer = agl_spans.named("invoke_agent writer")[0]
    assert ancestors(writer, by_id(agl_spans))[0] == "invoke_agent pipeline"
    assert {s.attributes.get("agl.rollout.id") for s in agl_spans.spans} == {"ro-seq"}


async def test_uninstrumented_runs_give_the_same_outputs(openai_test_server: OpenAITestServer) -> None:
    async def run_both() -> list[list[str]]:
        openai_test_server.set_replies(programs.COORDINATOR_REPLIES + programs.PIPELINE_REPLIES)
        return [await programs.run_coordinator(openai_test_server.base_url),
                await programs.run_pipeline(openai_test_server.base_url)]  # fmt: skip

    instrumented = await run_both()
    with uninstrumented():
        plain = await run_both()
    assert plain == instrumented == [["It is sunny in Paris."], programs.PIPELINE_REPLIES]
