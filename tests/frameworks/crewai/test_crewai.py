"""CrewAI: `invoke_agent {role}` per agent, `execute_tool` per tool, one LLM span per call under its agent with the
server's token ids (native provider and LiteLLM path), rollout ids, vendor uploads off, no behaviour change."""

from __future__ import annotations

import os

import pytest

import lightning_otel
from lightning_otel.testing import OpenAITestServer, SpanCapture
from tests.frameworks.crewai import programs
from tests.frameworks.span_tree import ancestors, assert_llm_spans_match_server, by_id, uninstrumented


@pytest.mark.parametrize("litellm", [False, True], ids=["native-provider", "litellm-path"])
def test_researcher_and_writer_crew(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture, litellm: bool
) -> None:
    if litellm:
        pytest.importorskip("litellm")
    openai_test_server.set_replies(programs.REPORT_REPLIES)
    with lightning_otel.rollout_context("ro-crew", "at-1"):
        output = programs.run_report(openai_test_server.base_url, litellm=litellm)
    assert output == "Report: orders grew 20% in 2024."
    assert_llm_spans_match_server(agl_spans, openai_test_server, ["researcher", "writer"])
    assert sorted(s.name for s in agl_spans.spans if s.name.startswith("invoke_agent")) == [
        "invoke_agent researcher", "invoke_agent writer"
    ]  # fmt: skip
    assert {s.attributes.get("agl.rollout.id") for s in agl_spans.spans} == {"ro-crew"}


def test_an_agent_with_a_tool(openai_test_server: OpenAITestServer, agl_spans: SpanCapture) -> None:
    openai_test_server.set_replies(programs.WEATHER_REPLIES)
    with lightning_otel.rollout_context("ro-tool", "at-1"):
        output = programs.run_weather(openai_test_server.base_url)
    assert output == "It is sunny in Paris."
    assert_llm_spans_match_server(agl_spans, openai_test_server, ["analyst", "analyst"])
    (tool,) = agl_spans.named("execute_tool get_weather")
    assert ancestors(tool, by_id(agl_spans))[0] == "invoke_agent analyst"
    assert {s.attributes.get("agl.rollout.id") for s in agl_spans.spans} == {"ro-tool"}


def test_crewai_uploads_are_off_while_instrumented(agl_spans: SpanCapture) -> None:
    assert os.environ["CREWAI_DISABLE_TELEMETRY"] == "true"
    assert os.environ["CREWAI_TRACING_ENABLED"] == "false"


def test_uninstrumented_runs_give_the_same_outputs(openai_test_server: OpenAITestServer) -> None:
    def run_both() -> list[str]:
        openai_test_server.set_replies(programs.REPORT_REPLIES + programs.WEATHER_REPLIES)
        return [programs.run_report(openai_test_server.base_url), programs.run_weather(openai_test_server.base_url)]

    instrumented = run_both()
    with uninstrumented():
        plain = run_both()
    assert plain == instrumented == ["Report: orders grew 20% in 2024.", "It is sunny in Paris."]
