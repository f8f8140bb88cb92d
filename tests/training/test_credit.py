"""Per-call credit on hand-computed examples: returns with a discount, anchor groups keyed by exact token deltas,
leave-one-out step advantages, singleton groups, a failed tool's penalty reaching the call that asked for it."""

from __future__ import annotations

import orjson
import pytest

from lightning_otel import semconv
from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.training.loop.advantages import GroupAdvantage
from lightning_otel.training.loop.credit import AnchorAdvantage, advantage_estimator
from lightning_otel.training.loop.samples import Sample
from tests.test_trace_adapter import llm, reward


def adapted(spans: list[dict], **adapter: object):
    return TraceToTriplet(**adapter).adapt(spans)  # type: ignore[arg-type]


def three_calls_with_an_intermediate_reward() -> list[dict]:
    return [
        llm("c0", 10, agent="a", prompt=[1], response=[2]),
        reward(15, 0.5),  # after call 0 started: a step reward of call 0
        llm("c1", 20, agent="a", prompt=[1, 2, 3], response=[4]),
        llm("c2", 30, agent="a", prompt=[1, 2, 3, 4, 5], response=[6]),
        reward(40, 1.0),  # the last primary reward: the final one
    ]


@pytest.mark.parametrize(("gamma", "expected"), [(1.0, [1.5, 1.0, 1.0]), (0.5, [0.75, 0.5, 1.0])])
def test_returns_credit_a_step_reward_to_the_calls_before_it_with_the_discount(gamma, expected) -> None:
    rollout = adapted(three_calls_with_an_intermediate_reward())
    assert rollout.final_reward == 1.0 and rollout.step_rewards_total == 0.5
    # call 0: 0.5 (its own step reward) + gamma^2 * 1.0; call 1: gamma * 1.0; call 2: 1.0
    samples = [Sample(t, 1.0, "g", rollout="r1", step_rewards_total=0.5) for t in rollout.triplets]
    AnchorAdvantage(gamma=gamma).assign(samples)
    assert [s.credit.call_return for s in samples] == pytest.approx(expected)
    assert [t.calls_after for t in rollout.triplets] == [2, 1, 0]


def test_a_step_reward_on_another_agents_call_credits_the_earlier_calls() -> None:
    spans = [
        llm("w0", 10, agent="write", prompt=[1], response=[2]),
        llm("k0", 20, agent="check", prompt=[9], response=[8]),
        reward(25, -1.0),  # the checker's call got it; the writer's earlier call shares it
        llm("w1", 30, agent="write", prompt=[1, 2, 7], response=[3]),
        reward(40, 1.0),
    ]
    rollout = adapted(spans, agent_match="write")
    first, second = rollout.triplets
    assert first.rewards_ahead == [(0, -1.0)]  # no writer call between w0 and the rewarded call
    assert second.rewards_ahead == []  # started after the reward's call
    samples = [Sample(t, 1.0, "g", rollout="r1", step_rewards_total=-1.0) for t in rollout.triplets]
    AnchorAdvantage().assign(samples)
    assert [s.credit.call_return for s in samples] == pytest.approx([0.0, 1.0])


def test_new_input_is_the_prompt_after_the_agents_previous_prompt_and_response() -> None:
    spans = [
        llm("c0", 10, agent="a", prompt=[1, 2], response=[3]),
        llm("c1", 20, agent="a", prompt=[1, 2, 3, 9, 9], response=[4]),  # extends: new input [9, 9]
        llm("c2", 30, agent="a", prompt=[7, 9, 9], response=[5]),  # does not extend: the whole prompt
        reward(40, 1.0),
    ]
    triplets = adapted(spans).triplets
    assert [t.new_input for t in triplets] == [[1, 2], [9, 9], [7, 9, 9]]


def two_turn_rollout(rollout: str, first_reply: int, observation: list[int], final: float) -> list[Sample]:
    spans = [
        llm(f"{rollout}-0", 10, agent="a", prompt=[1, 2], response=[first_reply]),
        llm(f"{rollout}-1", 20, agent="a", prompt=[1, 2, first_reply, *observation], response=[4]),
        reward(30, final),
    ]
    return [Sample(t, final, "task", rollout=rollout) for t in adapted(spans).triplets]


def test_anchor_groups_are_keyed_by_the_exact_token_delta_and_use_leave_one_out() -> None:
    # second calls: A and B saw the same observation [9, 9] after different replies (different prompts), C saw [9, 8]
    a, b, c = (two_turn_rollout("A", 3, [9, 9], 1.0), two_turn_rollout("B", 5, [9, 9], 0.0),
               two_turn_rollout("C", 6, [9, 8], 0.0))  # fmt: skip
    samples = [*a, *b, *c]
    metrics = AnchorAdvantage(normalize_by_std=False, step_weight=0.5).assign(samples)
    first_calls, second_calls = samples[0::2], samples[1::2]
    # first calls: one state (the whole first prompt) for all three: returns 1, 0, 0 -> leave-one-out 1, -0.5, -0.5
    assert {s.credit.anchor for s in first_calls} == {first_calls[0].credit.anchor}
    assert [s.credit.step_advantage for s in first_calls] == pytest.approx([1.0, -0.5, -0.5])
    # second calls: A and B share [9, 9] (returns 1 and 0: +1, -1); C's [9, 8] is alone: no step advantage
    assert second_calls[0].credit.anchor == second_calls[1].credit.anchor != second_calls[2].credit.anchor
    assert [s.credit.step_advantage for s in second_calls] == pytest.approx([1.0, -1.0, 0.0])
    assert [s.credit.anchor_size for s in second_calls] == [2, 2, 1]
    # rollout advantages: rewards 1, 0, 0 (mean 1/3); A = A_rollout + 0.5 * A_step
    assert [s.credit.rollout_advantage for s in first_calls] == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    assert [s.advantage for s in second_calls] == pytest.approx([2 / 3 + 0.5, -1 / 3 - 0.5, -1 / 3])
    assert metrics["credit/anchor_coverage"] == pytest.approx(5 / 6)  # C's second call is the only singleton
    assert metrics["credit/anchor_groups"] == 2.0


def test_step_advantage_normalised_by_the_groups_return_std() -> None:
    samples = [*two_turn_rollout("A", 3, [9], 1.0), *two_turn_rollout("B", 3, [9], 0.0)]
    AnchorAdvantage(normalize_by_std=True).assign(samples)
    std = 2**-0.5  # sample std of (1, 0)
    assert samples[0].credit.step_advantage == pytest.approx(1.0 / std, rel=1e-4)
    assert samples[0].credit.rollout_advantage == pytest.approx(0.5 / std, rel=1e-4)


def test_a_user_hook_can_normalise_the_state_before_grouping() -> None:
    samples = [*two_turn_rollout("A", 3, [9, 100], 1.0), *two_turn_rollout("B", 3, [9, 200], 0.0)]
    exact = AnchorAdvantage(normalize_by_std=False)
    exact.assign(samples)
    assert samples[1].credit.anchor_size == 1  # [9, 100] and [9, 200] differ

    def without_timestamp(agent, tokens):
        return tuple(token for token in tokens if token < 100)

    AnchorAdvantage(normalize_by_std=False, anchor_key=without_timestamp).assign(samples)
    assert samples[1].credit.anchor_size == 2 and samples[1].credit.step_advantage == pytest.approx(1.0)


def test_with_no_step_reward_and_singletons_anchor_equals_grpo() -> None:
    samples = [*two_turn_rollout("A", 3, [9], 1.0), *two_turn_rollout("B", 4, [8], 0.5)]
    grpo = [Sample(s.triplet, s.reward, s.group, rollout=s.rollout) for s in samples]
    GroupAdvantage().assign(grpo)
    # only the first calls share a state; with step_weight 0 the two estimators agree everywhere
    AnchorAdvantage(step_weight=0.0).assign(samples)
    assert [s.advantage for s in samples] == pytest.approx([s.advantage for s in grpo])


def tool_span(span_id: str, start: int, *, call_id: str | None, failed: bool, agent: str | None = None) -> dict:
    attributes = {semconv.GEN_AI_OPERATION_NAME: semconv.OP_EXECUTE_TOOL, semconv.GEN_AI_TOOL_NAME: "sql"}
    if call_id:
        attributes[semconv.GEN_AI_TOOL_CALL_ID] = call_id
    if agent:
        attributes[semconv.GEN_AI_AGENT_NAME] = agent
    return {"spanId": span_id, "name": "execute_tool sql", "startTimeUnixNano": start, "attributes": attributes,
            "status": {"code": 2 if failed else 1}}  # fmt: skip


def asking(span: dict, *tool_call_ids: str) -> dict:
    parts = [{"type": "tool_call", "id": call_id, "name": "sql", "arguments": {}} for call_id in tool_call_ids]
    span["attributes"][semconv.GEN_AI_OUTPUT_MESSAGES] = orjson.dumps([{"role": "assistant", "parts": parts}]).decode()
    return span


def test_a_failed_tool_penalises_the_call_that_asked_for_it_by_tool_call_id() -> None:
    spans = [
        asking(llm("c0", 10, agent="a", prompt=[1], response=[2]), "t1"),
        asking(llm("c1", 20, agent="a", prompt=[1, 2, 3], response=[4]), "t2"),
        tool_span("x1", 25, call_id="t1", failed=True),  # ran after c1 started: the id, not the time, decides
        tool_span("x2", 26, call_id="t2", failed=False),
        reward(40, 1.0),
    ]
    rollout = adapted(spans, process_rewards={"tool_error": -0.5})
    first, second = rollout.triplets
    assert first.rewards["tool_error"] == -0.5 and first.reward_sources == {"tool_error": "trace"}
    assert "tool_error" not in second.rewards
    samples = [
        Sample(t, 1.0, "g", rollout="r1", step_rewards_total=rollout.step_rewards_total) for t in rollout.triplets
    ]
    AnchorAdvantage().assign(samples)
    assert [s.credit.call_return for s in samples] == pytest.approx([0.5, 1.0])
    assert adapted(spans).triplets[0].rewards == {}  # off unless asked for


def test_without_ids_a_failed_tool_penalises_the_latest_call_of_its_agent_before_it() -> None:
    spans = [
        llm("c0", 10, agent="a", prompt=[1], response=[2]),
        llm("k0", 12, agent="b", prompt=[5], response=[6]),
        tool_span("x1", 15, call_id=None, failed=True, agent="a"),
        llm("c1", 20, agent="a", prompt=[1, 2, 3], response=[4]),
        reward(40, 1.0),
    ]
    rollout = adapted(spans, process_rewards={"tool_error": -1.0})
    assert [t.rewards.get("tool_error") for t in rollout.triplets] == [-1.0, None, None]


def test_a_cut_reply_and_a_failed_call_are_penalised() -> None:
    cut = llm("c0", 10, agent="a", prompt=[1], response=[2])
    cut["attributes"][semconv.GEN_AI_RESPONSE_FINISH_REASONS] = ["length"]
    failed = llm("c1", 20, agent="a", prompt=[1, 2, 3], response=[4])
    failed["status"] = {"code": 2}
    rollout = adapted([cut, failed, reward(30, 1.0)], process_rewards={"truncated": -0.2, "call_error": -1.0})
    assert [t.rewards.get("truncated") for t in rollout.triplets] == [-0.2, None]
    assert [t.rewards.get("call_error") for t in rollout.triplets] == [None, -1.0]
    with pytest.raises(ValueError, match="unknown process reward"):
        TraceToTriplet(process_rewards={"tool_failure": -1.0})


def test_advantage_names() -> None:
    base = GroupAdvantage(normalize_by_std=False, lone="zero")
    assert advantage_estimator("grpo", base) is base
    anchor = advantage_estimator("anchor", base)
    assert isinstance(anchor, AnchorAdvantage) and anchor.settings.normalize_by_std is False
    assert anchor.settings.lone == "zero" and anchor.describe()["advantage"] == "anchor"
    with pytest.raises(ValueError, match="advantage must be"):
        advantage_estimator("gigpo", base)
