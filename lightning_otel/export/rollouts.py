"""One stored rollout as exported: its queue record (task, group, run, step, reward) and every LLM call its spans
hold (exact token ids, logprobs, messages when content was recorded, the call's own reward, whether `agent_match`
selects it). The rows of every shape (`shapes`) are made from these; online DPO forms its pairs from them too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lightning_otel.adapters.diagnostics import RolloutDiagnostics
from lightning_otel.adapters.llm_calls import llm_calls, rollout_agent_names, span_with_messages
from lightning_otel.adapters.messages import call_messages, call_tools
from lightning_otel.adapters.recorded_settings import recorded_adapter
from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.flat_span import Span

AGENT_MATCH_OF_RUN: Any = ...  # the default agent_match: the one the rollout's run trained with (its metadata)


@dataclass(slots=True)
class ExportedCall:
    index: int  # its place among the rollout's LLM calls, in start order
    span_id: str
    response_id: str | None
    agent: str | None
    selected: bool  # agent_match selects it
    prompt_token_ids: list[int] | None
    response_token_ids: list[int] | None
    response_logprobs: list[float] | None
    input_messages: list[dict[str, Any]] | None  # None: the span has no message content
    output_message: dict[str, Any] | None
    reward: float | None  # the primary reward given to this call (agl.emit_reward during the rollout), if any
    policy_version: int | None
    tools: list[dict[str, Any]] | None = None  # the tools the request offered (OpenAI's chat format), with content

    def json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}  # type: ignore[attr-defined]


@dataclass(slots=True)
class ExportedRollout:
    rollout_id: str
    attempt_id: str | None
    task_id: str | None
    group_id: str | None
    run_id: str | None
    step: int | None
    mode: str | None
    status: str | None
    reward: float | None  # the trace's final reward, else the one the runner reported
    input: Any
    policy_version: int | None
    calls: list[ExportedCall] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list, repr=False)  # its final attempt's, as read (ATIF needs more)
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)  # what its run recorded on it (adapter, ...)

    @property
    def selected_calls(self) -> list[ExportedCall]:
        return [call for call in self.calls if call.selected]


def exported_rollout(
    record: dict[str, Any], spans: list[Span], agent_match: Any = AGENT_MATCH_OF_RUN
) -> ExportedRollout:
    """`record`: the queue's record of the rollout (`Client.rollouts_page`); `spans`: its final attempt's spans."""
    metadata = record.get("metadata") or {}
    pattern = recorded_adapter(metadata).get("agent_match") if agent_match is AGENT_MATCH_OF_RUN else agent_match
    selector = TraceToTriplet(agent_match=pattern)
    adapted = TraceToTriplet(agent_match=None).adapt(spans, task_id=record.get("task_id"))  # every call's reward
    reward_of = {triplet.span_ids[0]: triplet.reward for triplet in adapted.triplets}
    agents = rollout_agent_names(spans)
    calls = []
    for index, call in enumerate(llm_calls(spans, RolloutDiagnostics(None))):
        span_id = str(call.span.get("spanId"))
        with_content = span_with_messages(call.span, call.copies)
        messages = call_messages(with_content)
        calls.append(
            ExportedCall(
                index=index,
                span_id=span_id,
                response_id=call.response_id,
                agent=call.agent,
                selected=selector.matches(call.agent, agents),
                prompt_token_ids=call.prompt,
                response_token_ids=call.response,
                response_logprobs=call.logprobs,
                input_messages=messages[0] if messages else None,
                output_message=messages[1] if messages else None,
                tools=call_tools(with_content),
                reward=reward_of.get(span_id),
                policy_version=call.policy_version,
            )
        )
    versions = [call.policy_version for call in calls if call.policy_version is not None]
    step = metadata.get("step")
    return ExportedRollout(
        rollout_id=str(record["rollout_id"]),
        attempt_id=record.get("attempt_id"),
        task_id=record.get("task_id"),
        group_id=record.get("group_id"),
        run_id=metadata.get("run_id"),
        step=int(step) if isinstance(step, int) else None,
        mode=record.get("mode"),
        status=record.get("status"),
        reward=adapted.final_reward if adapted.final_reward is not None else record.get("reward"),
        input=record.get("input"),
        policy_version=min(versions) if versions else metadata.get("policy_version"),
        calls=calls,
        spans=spans,
        metadata=dict(metadata),
    )
