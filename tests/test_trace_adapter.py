"""TraceToTriplet: selection by operation and agent_match, dedupe by response id, reward assignment, trajectory
merging with masks, diagnostics; and the whole pipeline (client -> OTLP -> collector -> adapter) in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_otel import semconv
from lightning_otel.adapters.messages import TraceToMessages
from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.capture import message_content

ROOT = Path(__file__).resolve().parent.parent


def llm(
    span_id: str,
    start: int,
    *,
    agent: str | None,
    prompt: list[int] | None,
    response: list[int] | None,
    response_id: str | None = None,
    logprobs: list[float] | None = None,
    complete: bool = True,
) -> dict:
    attributes = {semconv.GEN_AI_OPERATION_NAME: "chat", semconv.AGL_ROLLOUT_ID: "r1", semconv.AGL_ATTEMPT_ID: "a1"}
    for key, value in (
        (semconv.GEN_AI_AGENT_NAME, agent),
        (semconv.AGL_PROMPT_TOKEN_IDS, prompt),
        (semconv.AGL_RESPONSE_TOKEN_IDS, response),
        (semconv.GEN_AI_RESPONSE_ID, response_id),
        (semconv.AGL_RESPONSE_LOGPROBS, logprobs),
    ):
        if value is not None:
            attributes[key] = value
    if prompt is not None:
        attributes[semconv.AGL_TOKEN_IDS_COMPLETE] = complete
    return {"spanId": span_id, "name": "chat m", "startTimeUnixNano": start, "attributes": attributes}


def reward(start: int, value: float, name: str = "primary", response_id: str | None = None) -> dict:
    attributes = {semconv.AGL_REWARD_VALUE: value, semconv.AGL_REWARD_NAME: name, semconv.AGL_ROLLOUT_ID: "r1"}
    if response_id:
        attributes[semconv.AGL_REWARD_RESPONSE_ID] = response_id
    return {
        "spanId": f"rw{start}",
        "name": semconv.REWARD_SPAN_NAME,
        "startTimeUnixNano": start,
        "attributes": attributes,
    }


def agent_span(start: int, name: str) -> dict:
    return {
        "spanId": f"ag{start}",
        "name": f"invoke_agent {name}",
        "startTimeUnixNano": start,
        "attributes": {semconv.GEN_AI_OPERATION_NAME: "invoke_agent", semconv.GEN_AI_AGENT_NAME: name},
    }


def test_selects_llm_calls_by_operation_and_agent_match_in_time_order() -> None:
    spans = [
        llm("c", 30, agent="rewriter", prompt=[5], response=[6]),
        agent_span(1, "writer"),  # not an LLM call, although its name could match
        llm("a", 10, agent="writer", prompt=[1, 2], response=[3], logprobs=[-0.5]),
        llm("b", 20, agent="checker", prompt=[4], response=[4]),
        llm("d", 40, agent=None, prompt=[7], response=[8]),
    ]
    adapted = TraceToTriplet(agent_match="write").adapt(spans, task_id="t-1")
    assert [(t.agent_name, t.prompt_token_ids, t.response_token_ids) for t in adapted.triplets] == [
        ("writer", [1, 2], [3]),
        ("rewriter", [5], [6]),
    ]
    first = adapted.triplets[0]
    assert (first.response_logprobs, first.response_mask, first.span_ids) == ([-0.5], [1], ["a"])
    assert (first.rollout_id, first.attempt_id, first.task_id) == ("r1", "a1", "t-1")
    d = adapted.diagnostics
    assert (d.agents_seen, d.llm_calls, d.matched_calls, d.unmatched_calls) == (
        ["checker", "rewriter", "writer"],
        4,
        2,
        2,
    )
    assert len(TraceToTriplet().adapt(spans).triplets) == 4  # None: every call, unnamed ones too
    assert [t.agent_name for t in TraceToTriplet(agent_match="^write").adapt(spans).triplets] == ["writer"]


def test_calls_without_token_ids_are_counted_not_trained() -> None:
    spans = [
        llm("a", 1, agent="w", prompt=None, response=None),
        llm("b", 2, agent="w", prompt=[1], response=[2], complete=False),
    ]
    adapted = TraceToTriplet().adapt(spans)
    assert len(adapted.triplets) == 1
    assert (adapted.diagnostics.calls_without_token_ids, adapted.diagnostics.incomplete_token_ids) == (1, 1)


def test_duplicates_by_response_id_keep_the_copy_with_token_ids() -> None:
    spans = [
        llm("client", 1, agent="w", prompt=None, response=None, response_id="chatcmpl-1"),
        llm("gateway", 2, agent=None, prompt=[1], response=[2], response_id="chatcmpl-1"),
    ]
    adapted = TraceToTriplet(agent_match="w").adapt(spans)
    (triplet,) = adapted.triplets
    assert triplet.span_ids == ["gateway"] and triplet.agent_name == "w"  # the name survives from the other copy
    assert adapted.diagnostics.duplicate_calls == 1 and adapted.diagnostics.llm_calls == 1


def test_reward_assignment() -> None:
    spans = [
        reward(0, 9.0),  # before any call: belongs to none
        llm("a", 10, agent="w", prompt=[1], response=[2], response_id="x"),
        llm("b", 20, agent="w", prompt=[3], response=[4], response_id="y"),
        reward(25, 0.5, response_id="x"),  # explicitly for the first call
        reward(30, 1.0),  # the latest preceding call without a primary reward: b
        reward(30, 0.2, name="format"),  # a named reward emitted with it goes to the same call
        llm("c", 40, agent="w", prompt=[5], response=[6]),
        reward(50, 0.0),
    ]
    adapted = TraceToTriplet().adapt(spans)
    assert [(t.reward, t.rewards) for t in adapted.triplets] == [
        (0.5, {"primary": 0.5}),
        (1.0, {"primary": 1.0, "format": 0.2}),
        (0.0, {"primary": 0.0}),
    ]
    assert adapted.final_reward == 0.0
    assert adapted.diagnostics.rewards_without_call == 1
    by_format = TraceToTriplet(reward="format").adapt(spans)
    assert [t.reward for t in by_format.triplets] == [None, 0.2, None] and by_format.final_reward == 0.2


def test_trajectory_merges_extending_prompts_and_masks_inserted_tokens() -> None:
    spans = [
        llm("a", 10, agent="w", prompt=[1, 2], response=[3, 4], logprobs=[-1.0, -2.0]),
        llm("x", 15, agent="c", prompt=[9], response=[9]),  # another agent in between
        llm("b", 20, agent="w", prompt=[1, 2, 3, 4, 7, 8], response=[5], logprobs=[-3.0]),  # 7, 8: tool output
        llm("c", 30, agent="w", prompt=[1, 2, 99], response=[6], logprobs=[-4.0]),  # history rewritten: new segment
        reward(40, 1.0),
    ]
    adapted = TraceToTriplet(agent_match="^w$", mode="trajectory").adapt(spans)
    merged, fresh = adapted.triplets
    assert merged.prompt_token_ids == [1, 2]
    assert merged.response_token_ids == [3, 4, 7, 8, 5]
    assert merged.response_mask == [1, 1, 0, 0, 1]
    assert merged.response_logprobs == [-1.0, -2.0, 0.0, 0.0, -3.0]
    assert merged.span_ids == ["a", "b"]
    assert (fresh.prompt_token_ids, fresh.response_token_ids, fresh.reward) == ([1, 2, 99], [6], 1.0)
    assert adapted.diagnostics.merge_breaks == 1


def test_every_llm_span_gets_a_decision_saying_why() -> None:
    spans = [
        llm("a", 10, agent="writer", prompt=[1], response=[2], response_id="x"),
        llm("a-gateway", 11, agent=None, prompt=[1], response=[2], response_id="x", complete=False),
        llm("b", 20, agent="checker", prompt=[3], response=[4]),
        llm("c", 30, agent="writer", prompt=None, response=None),
        llm("d", 40, agent="rewriter", prompt=[5], response=[6], complete=False),
    ]
    adapted = TraceToTriplet(agent_match="write").adapt(spans)
    by_span = {d.span_id: d for d in adapted.diagnostics.calls}
    assert [d.span_id for d in adapted.diagnostics.calls] == ["a", "b", "c", "d", "a-gateway"]
    assert (by_span["a"].selected, by_span["a"].sample) == (True, 0)
    assert "finds the call's agent 'writer'" in by_span["a"].reason
    assert not by_span["a-gateway"].selected and by_span["a-gateway"].reason.startswith("duplicate")
    assert not by_span["b"].selected and "finds neither the call's agent 'checker'" in by_span["b"].reason
    assert not by_span["c"].selected and "no token ids" in by_span["c"].reason
    assert (by_span["d"].selected, by_span["d"].sample) == (True, 1) and "incomplete" in by_span["d"].reason
    # the rollout's agent selects every call of its rollouts; None selects everything
    with_rollout_agent = [*spans, {"spanId": "r", "name": "invoke_agent LitSql", "startTimeUnixNano": 1,
                                   "attributes": {semconv.AGL_ROLLOUT_AGENT_NAMES: ["LitSql"]}}]  # fmt: skip
    decisions = TraceToTriplet(agent_match="^Lit").adapt(with_rollout_agent).diagnostics.calls
    assert "finds the rollout's agent 'LitSql'" in next(d for d in decisions if d.span_id == "b").reason
    assert sum(d.selected for d in TraceToTriplet().adapt(spans).diagnostics.calls) == 3


def test_trajectory_samples_name_every_merged_call() -> None:
    spans = [
        llm("a", 10, agent="w", prompt=[1], response=[2]),
        llm("b", 20, agent="w", prompt=[1, 2, 9], response=[3]),
    ]
    adapted = TraceToTriplet(mode="trajectory").adapt(spans)
    assert [(d.span_id, d.sample) for d in adapted.diagnostics.calls] == [("a", 0), ("b", 0)]


def test_configuration_forms_and_errors() -> None:
    assert TraceToTriplet.from_config({"agent_match": "write", "mode": "trajectory"}).mode == "trajectory"
    assert TraceToTriplet.from_config(None).agent_match is None
    adapter = TraceToTriplet("x")
    assert TraceToTriplet.from_config(adapter) is adapter
    with pytest.raises(ValueError, match="not a valid regular expression"):
        TraceToTriplet(agent_match="(")
    with pytest.raises(ValueError, match="mode"):
        TraceToTriplet(mode="episode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown adapter option"):
        TraceToTriplet.from_config({"agent_matc": "x"})


def test_whole_pipeline_gives_the_servers_exact_token_ids() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGL_"))}  # export for real
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "programs" / "adapter_pipeline.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = json.loads(result.stdout)
    first, second, _ = out["served"]
    transition = out["transition"]
    assert [(t["prompt"], t["response"]) for t in transition["triplets"]] == [
        (first["prompt"], first["response"]),
        (second["prompt"], second["response"]),
    ]
    assert all(t["agent"] == "writer" and t["rollout"] == "rollout-1" for t in transition["triplets"])
    assert all(len(t["logprobs"]) == len(t["response"]) for t in transition["triplets"])
    assert transition["final_reward"] == 1.0
    assert transition["diagnostics"] == {
        "agents_seen": ["checker", "writer"],
        "matched": 2,
        "unmatched": 1,
        "merge_breaks": 0,
    }
    (merged,) = out["trajectory"]["triplets"]  # the second turn's prompt extends the first turn exactly
    inserted = second["prompt"][len(first["prompt"]) + len(first["response"]) :]
    assert merged["response"] == first["response"] + inserted + second["response"]
    assert merged["mask"] == [1] * len(first["response"]) + [0] * len(inserted) + [1] * len(second["response"])
    assert out["messages"] == [  # content was captured: the writer's two calls as fine-tuning examples
        {"messages": [{"role": "user", "content": "write the query"}, {"role": "assistant", "content": "SELECT 1;"}]},
        {
            "messages": [
                {"role": "user", "content": "write the query"},
                {"role": "assistant", "content": "SELECT 1;"},
                {"role": "user", "content": "once more"},
                {"role": "assistant", "content": "SELECT 2;"},
            ],
            "tools": [  # as the request offered them: the fields in their order, for the template that renders them
                {"type": "function", "function": {"name": "run_sql", "description": "Run a query",
                 "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}
            ],
        },
    ]  # fmt: skip
    assert list(out["messages"][1]["tools"][0]["function"]) == ["name", "description", "parameters"]


def test_messages_with_tool_calls_and_missing_content() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "You write SQL."},
            {"role": "user", "content": "count orders"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "function": {"name": "run_sql", "arguments": '{"q": "SELECT 1"}'}}],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "1"},
        ]
    }
    with_content = llm("a", 1, agent="w", prompt=[1], response=[2])
    with_content["attributes"][semconv.GEN_AI_INPUT_MESSAGES] = message_content.to_json(
        message_content.input_messages(body)
    )
    with_content["attributes"][semconv.GEN_AI_OUTPUT_MESSAGES] = message_content.to_json(
        [message_content.output_message("assistant", "There is 1 order.", [], "stop")]
    )
    adapter = TraceToMessages(agent_match="w")
    (example,) = adapter.adapt([with_content, llm("b", 2, agent="w", prompt=[1], response=[2])])
    assert example["messages"] == [
        {"role": "system", "content": "You write SQL."},
        {"role": "user", "content": "count orders"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "run_sql", "arguments": '{"q": "SELECT 1"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "1"},
        {"role": "assistant", "content": "There is 1 order."},
    ]
    assert adapter.calls_without_content == 1
    assert json.loads(TraceToMessages.to_jsonl([example]).splitlines()[0]) == example
    assert "tools" not in example  # the request offered none


def test_tool_definitions_in_every_dialect_read_back_in_openais_chat_format() -> None:
    parameters = {"type": "object", "properties": {"q": {"type": "string"}}}
    function = {"name": "f", "description": "d", "parameters": parameters}
    bodies = {
        "chat": {"tools": [{"type": "function", "function": function}]},
        "legacy functions": {"functions": [{"name": "f", "description": "d", "parameters": parameters}]},
        "responses": {"tools": [{"type": "function", "name": "f", "description": "d", "parameters": parameters}]},
        "anthropic": {"tools": [{"name": "f", "description": "d", "input_schema": parameters}]},
    }  # fmt: skip
    for dialect, body in bodies.items():
        definitions = message_content.tool_definitions(body)
        # the conventions' shape: flat, the function's own fields after its type
        assert definitions == [{"type": "function", "name": "f", "description": "d", "parameters": parameters}], dialect
        span = llm("a", 1, agent="w", prompt=[1], response=[2])
        reply = message_content.output_message("assistant", "x", [], "stop")
        span["attributes"].update({
            semconv.GEN_AI_INPUT_MESSAGES: message_content.to_json([{"role": "user", "parts": []}]),
            semconv.GEN_AI_OUTPUT_MESSAGES: message_content.to_json([reply]),
            semconv.GEN_AI_TOOL_DEFINITIONS: message_content.to_json(definitions),
        })  # fmt: skip
        (example,) = TraceToMessages().adapt([span])
        assert example["tools"] == [{"type": "function", "function": function}], dialect
    hosted = message_content.tool_definitions({"tools": [{"type": "web_search"}]})
    assert hosted == [{"type": "web_search"}]  # kept as given: a template may know it
    assert message_content.tool_definitions({"tools": []}) == message_content.tool_definitions({}) == []
