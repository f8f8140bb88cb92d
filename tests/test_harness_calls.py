"""The join of a harness's own LLM spans to the gateway's records of the same requests (adapters.harness_calls):
by conversation and time, by count and order when clocks disagree, and said per call when neither works."""

from __future__ import annotations

from typing import Any

import pytest

from lightning_otel import semconv
from lightning_otel.adapters.harness_calls import harness_agent_name
from lightning_otel.adapters.triplets import TraceToTriplet

MS = 1_000_000


def gateway_call(span_id: str, conversation: str, start_ms: int, end_ms: int, token: int) -> dict[str, Any]:
    attributes = {semconv.GEN_AI_OPERATION_NAME: "chat", semconv.GEN_AI_CONVERSATION_ID: conversation,
                  semconv.AGL_PROMPT_TOKEN_IDS: [1, 2, token], semconv.AGL_RESPONSE_TOKEN_IDS: [token, 9],
                  semconv.GEN_AI_RESPONSE_ID: f"resp-{span_id}", semconv.AGL_ROLLOUT_ID: "ro-1"}  # fmt: skip
    return {"spanId": span_id, "name": "chat policy", "startTimeUnixNano": start_ms * MS,
            "endTimeUnixNano": end_ms * MS, "attributes": attributes}  # fmt: skip


def harness_call(span_id: str, conversation: str, start_ms: int, end_ms: int, source: str) -> dict[str, Any]:
    attributes = {semconv.GEN_AI_OPERATION_NAME: "chat", semconv.GEN_AI_CONVERSATION_ID: conversation,
                  "query_source_safe": source, semconv.AGL_ROLLOUT_ID: "ro-1"}  # fmt: skip
    return {"spanId": span_id, "name": "claude_code.llm_request", "startTimeUnixNano": start_ms * MS,
            "endTimeUnixNano": end_ms * MS, "attributes": attributes}  # fmt: skip


@pytest.mark.parametrize(
    ("source", "name"),
    [("agent.builtin.Explore", "Explore"), ("agent.custom.reviewer", "reviewer"), ("sdk", "main"),
     ("repl_main_thread", "main"), ("compact", "compact")],
)  # fmt: skip
def test_claude_codes_query_sources_name_agents(source: str, name: str) -> None:
    assert harness_agent_name({"query_source_safe": source}) == name
    assert harness_agent_name({semconv.GEN_AI_AGENT_NAME: "planner", "query_source": source}) == "planner"


def test_each_call_takes_the_agent_of_the_harness_span_that_holds_it_in_time() -> None:
    spans = [
        harness_call("h1", "session", 0, 100, "sdk"),
        gateway_call("g1", "session", 10, 90, 11),
        harness_call("h2", "agent-7", 110, 200, "agent.builtin.Explore"),
        gateway_call("g2", "agent-7", 120, 190, 12),
        harness_call("h3", "session", 210, 300, "sdk"),
        harness_call("h3-retry", "session", 305, 400, "sdk"),  # a retried request: the gateway saw the second
        gateway_call("g3", "session", 310, 390, 13),
    ]
    adapted = TraceToTriplet(agent_match="^Explore$").adapt(spans)
    assert [t.span_ids for t in adapted.triplets] == [["g2"]]
    named = {d.span_id: d.agent for d in adapted.diagnostics.calls}
    assert named == {"g1": "main", "g2": "Explore", "g3": "main", "h1": "main", "h2": "Explore",
                     "h3-retry": "main", "h3": "main"}  # fmt: skip
    unjoined = next(d for d in TraceToTriplet(agent_match="main").adapt(spans).diagnostics.calls if d.span_id == "h3")
    assert unjoined.reason.startswith("no sample")  # a request the gateway never answered: no token ids, said so
    assert "the gateway recorded no call of conversation 'session' that this harness span holds" in unjoined.reason


def test_clocks_apart_join_by_count_and_order() -> None:
    # the harness on another machine, its clock 5 s ahead: no span holds a call, the counts agree
    spans = [harness_call("h1", "s", 5000, 5100, "sdk"), harness_call("h2", "s", 5200, 5300, "agent.custom.critic"),
             gateway_call("g1", "s", 10, 90, 11), gateway_call("g2", "s", 210, 290, 12)]  # fmt: skip
    adapted = TraceToTriplet(agent_match="critic").adapt(spans)
    assert [t.span_ids for t in adapted.triplets] == [["g2"]]


def test_a_call_no_harness_span_explains_says_why_in_the_rollout_view() -> None:
    spans = [harness_call("h1", "s", 5000, 5100, "sdk"), gateway_call("g1", "s", 10, 90, 11),
             gateway_call("g2", "s", 210, 290, 12), gateway_call("g3", "other", 300, 390, 13)]  # fmt: skip
    adapted = TraceToTriplet(agent_match=None).adapt(spans)
    reasons = {d.span_id: d.reason for d in adapted.diagnostics.calls}
    assert "no harness span of conversation 's' holds this call in time" in reasons["g1"]
    assert "no harness span names conversation 'other'" in reasons["g3"]
    assert len(adapted.triplets) == 3  # trained all the same (agent_match=None); only the agent is unknown
    assert all(t.agent_name is None for t in adapted.triplets)


def test_a_rewritten_history_is_a_new_prefix_never_glued_to_the_old_one() -> None:
    """Claude Code compacts a long conversation (its next prompt is a summary, not the old prompt extended) and
    starts sub-agents with a fresh context: in trajectory mode neither is merged with what came before."""

    def call(span_id: str, conversation: str, start_ms: int, prompt: list[int], response: list[int]) -> dict:
        span = gateway_call(span_id, conversation, start_ms, start_ms + 50, 0)
        span["attributes"][semconv.AGL_PROMPT_TOKEN_IDS], span["attributes"][semconv.AGL_RESPONSE_TOKEN_IDS] = (
            prompt, response)  # fmt: skip
        return span

    spans = [
        harness_call("h1", "s", 0, 100, "sdk"), call("g1", "s", 10, [1, 2], [3]),
        harness_call("h2", "s", 200, 300, "sdk"), call("g2", "s", 210, [1, 2, 3, 4], [5]),  # extends g1: merged
        harness_call("h3", "a1", 400, 500, "agent.builtin.Explore"), call("g3", "a1", 410, [9, 8], [7]),
        harness_call("h4", "s", 600, 700, "compact"), call("g4", "s", 610, [6, 1], [2]),  # the summary
        harness_call("h5", "s", 800, 900, "sdk"), call("g5", "s", 810, [6, 1, 2, 4], [5]),  # after the summary
    ]  # fmt: skip
    adapted = TraceToTriplet(agent_match=None, mode="trajectory").adapt(spans)
    assert [(t.agent_name, t.span_ids) for t in adapted.triplets] == [
        ("main", ["g1", "g2"]), ("Explore", ["g3"]), ("compact", ["g4"]), ("main", ["g5"])]  # fmt: skip
    assert adapted.diagnostics.merge_breaks >= 1  # main's history rewritten: g5 does not extend g2
