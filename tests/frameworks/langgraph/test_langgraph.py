"""LangGraph / LangChain: agent spans per named agent or graph node, tool spans, one LLM span per call under its
agent with the server's token ids, rollout ids, no behaviour change."""

from __future__ import annotations

import logging

import pytest

import lightning_otel
from lightning_otel.testing import OpenAITestServer, SpanCapture
from tests.frameworks.langgraph import programs
from tests.frameworks.span_tree import ancestors, assert_llm_spans_match_server, by_id, uninstrumented

# langchain-openai caches its async HTTP client per process: keep every test on one event loop.
pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "stream"])
async def test_hand_built_sql_graph_nodes_are_agents(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    openai_test_server.set_replies(programs.SQL_REPLIES)
    graph = programs.sql_graph(openai_test_server.base_url)
    state = {"question": "orders in 2024"}
    with caplog.at_level(logging.ERROR), lightning_otel.rollout_context("ro-sql", "at-1"):
        if mode == "invoke":
            result = graph.invoke(state)
        elif mode == "ainvoke":
            result = await graph.ainvoke(state)
        else:
            result = {}
            async for update in graph.astream(state, stream_mode="values"):
                result = update
    assert result["query"] == "SELECT * FROM t WHERE year = 2024;"
    assert_llm_spans_match_server(agl_spans, openai_test_server, ["write", "check", "rewrite"])
    assert sorted(s.name for s in agl_spans.spans if s.name.startswith("invoke_agent")) == [
        "invoke_agent check", "invoke_agent rewrite", "invoke_agent write"
    ]  # fmt: skip
    assert {s.attributes.get("agl.rollout.id") for s in agl_spans.spans} == {"ro-sql"}
    assert "Failed to detach context" not in caplog.text


async def test_supervisor_routes_to_named_sub_agents(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture
) -> None:
    openai_test_server.set_replies(programs.SUPERVISOR_REPLIES)
    graph = programs.supervisor_graph(openai_test_server.base_url)
    with lightning_otel.rollout_context("ro-sup", "at-1"):
        result = await graph.ainvoke({"messages": [{"role": "user", "content": "What is 2 + 3?"}]})
    assert result["messages"][-1].content == "The answer is 5."
    assert_llm_spans_match_server(agl_spans, openai_test_server, ["supervisor", "math", "math", "supervisor"])
    (tool,) = agl_spans.named("execute_tool add")
    assert ancestors(tool, by_id(agl_spans))[0] == "invoke_agent math"
    assert {s.attributes.get("agl.rollout.id") for s in agl_spans.spans} == {"ro-sup"}


async def test_uninstrumented_runs_give_the_same_outputs(openai_test_server: OpenAITestServer) -> None:
    async def run_both() -> list[str]:
        openai_test_server.set_replies(programs.SQL_REPLIES + programs.SUPERVISOR_REPLIES)
        sql = programs.sql_graph(openai_test_server.base_url).invoke({"question": "q"})["query"]
        messages = {"messages": [{"role": "user", "content": "What is 2 + 3?"}]}
        sup = (await programs.supervisor_graph(openai_test_server.base_url).ainvoke(messages))["messages"][-1].content
        return [sql, sup]

    instrumented = await run_both()
    with uninstrumented():
        plain = await run_both()
    assert plain == instrumented == ["SELECT * FROM t WHERE year = 2024;", "The answer is 5."]


async def test_a_stream_broken_off_early_leaves_no_context_errors(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture, caplog: pytest.LogCaptureFixture
) -> None:
    openai_test_server.set_replies(programs.SQL_REPLIES)
    graph = programs.sql_graph(openai_test_server.base_url)
    with caplog.at_level(logging.DEBUG), lightning_otel.rollout_context("ro-break", "at-1"):
        async for _ in graph.astream({"question": "q"}, stream_mode="updates"):
            break  # stop after the first node's update
    lightning_otel.flush()
    assert "Failed to detach context" not in caplog.text
    (write,) = agl_spans.named("invoke_agent write")  # the node that ran is a complete span
    assert write.end_time is not None
    assert all(s.attributes.get("agl.rollout.id") == "ro-break" for s in agl_spans.spans)
