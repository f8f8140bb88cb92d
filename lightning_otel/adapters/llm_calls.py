"""A rollout's LLM calls read from its spans: one per response id (the copy with complete token ids kept, the others
its `copies`), in start order, each with its agent (its own span's, its harness's, or the nearest agent above it in
the trace) and its token ids; and the messages a call recorded, wherever its spans put them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_otel import semconv
from lightning_otel.adapters.diagnostics import CallDecision, RolloutDiagnostics
from lightning_otel.adapters.harness_calls import HarnessJoin, harness_agent_name, join_harness_calls
from lightning_otel.flat_span import Span


@dataclass(slots=True)
class Call:
    """One LLM call of a rollout: its span, agent, token ids, the policy that served it, and what the adapter adds
    (the policy it trains, its rewards and step rewards)."""

    span: Span
    start_ns: int
    agent: str | None
    prompt: list[int] | None
    response: list[int] | None
    logprobs: list[float] | None
    complete: bool
    response_id: str | None
    policy_version: int | None = None
    served_by: str | None = None  # the policy that sampled it (`agl.llm.policy`, on the policy gateway's copy)
    policy: str | None = None  # the policy it trains (agent_match as a mapping)
    rewards: dict[str, float] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    step_rewards: list[float] = field(default_factory=list)  # the rewards credited as steps (credit module)
    copies: list[Span] = field(default_factory=list)  # other spans of the same response (the gateway's, the client's)
    note: str | None = None  # why its agent is not known, where that is worth saying (a harness join that failed)


def _call(span: Span) -> Call:
    attributes = span.get("attributes") or {}
    prompt = attributes.get(semconv.AGL_PROMPT_TOKEN_IDS)
    response = attributes.get(semconv.AGL_RESPONSE_TOKEN_IDS)
    logprobs = attributes.get(semconv.AGL_RESPONSE_LOGPROBS)
    return Call(
        span=span,
        start_ns=int(span.get("startTimeUnixNano") or 0),
        agent=attributes.get(semconv.GEN_AI_AGENT_NAME),
        prompt=list(prompt) if prompt is not None else None,
        response=list(response) if response is not None else None,
        logprobs=[float(x) for x in logprobs] if logprobs else None,
        complete=attributes.get(semconv.AGL_TOKEN_IDS_COMPLETE) is not False,
        response_id=attributes.get(semconv.GEN_AI_RESPONSE_ID),
        policy_version=_version(attributes.get(semconv.AGL_POLICY_VERSION)),
        served_by=attributes.get(semconv.AGL_LLM_POLICY),
    )


def _version(value: object) -> int | None:
    try:
        return int(value) if value is not None else None  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def llm_calls(spans: Sequence[Span], diagnostics: RolloutDiagnostics) -> list[Call]:
    """The rollout's LLM calls in start order, one per response id (the copy with complete ids kept)."""
    calls: list[Call] = []
    by_response_id: dict[str, int] = {}
    agents: set[str] = set()
    duplicates: list[tuple[Call, Call]] = []  # (dropped copy, kept copy)
    ancestry: _AgentAncestry | None = None
    operations = semconv.LLM_OPERATIONS
    llm_spans = [s for s in spans if (s.get("attributes") or {}).get(semconv.GEN_AI_OPERATION_NAME) in operations]
    harness = _harness_join(llm_spans)
    for span in llm_spans:
        span_id = str(span.get("spanId"))
        if harness is not None and span_id in harness.joined:  # a harness's record of a gateway call: a copy
            diagnostics.harness_copies += 1
            continue
        call = _call(span)
        if call.agent is None and harness is not None:
            if found := harness.agents.get(span_id):  # the harness that made the call names its agent
                call.agent, own = found
                call.copies.append(own)
                diagnostics.calls.append(CallDecision(str(own.get("spanId")), call.agent, False, ("harness", span_id)))
            elif why := harness.unjoined.get(span_id):
                call.note = why
                if call.prompt is None:  # a harness span alone: its own name for its agent
                    call.agent = harness_agent_name(span.get("attributes") or {})
        if call.agent is None:  # recorded in another process (the policy gateway, under the caller's traceparent)
            ancestry = ancestry or _AgentAncestry(spans)
            call.agent = ancestry.agent_of(span)
        diagnostics.llm_calls += 1
        if call.agent:
            agents.add(call.agent)
        if call.response_id and call.response_id in by_response_id:
            diagnostics.duplicate_calls += 1
            kept = calls[by_response_id[call.response_id]]
            if _quality(call) > _quality(kept):  # keep the copy with (complete) token ids
                call.agent = call.agent or kept.agent
                call.served_by = call.served_by if call.served_by is not None else kept.served_by
                call.copies = [*kept.copies, kept.span]
                calls[by_response_id[call.response_id]] = call
                dropped, kept = kept, call
            else:  # e.g. the gateway's copy came first: the client's copy knows the agent
                kept.agent = kept.agent or call.agent
                kept.served_by = kept.served_by if kept.served_by is not None else call.served_by
                kept.copies.append(call.span)
                dropped = call
            duplicates.append((dropped, kept))
            continue
        if call.response_id:
            by_response_id[call.response_id] = len(calls)
        calls.append(call)
    diagnostics.llm_calls -= diagnostics.duplicate_calls
    calls = _delivered(calls, spans, diagnostics)
    diagnostics.agents_seen = sorted(agents)
    calls.sort(key=lambda c: c.start_ns)
    for dropped, kept in duplicates:
        why = ("duplicate", kept.span.get("spanId"), dropped.response_id)
        diagnostics.calls.append(CallDecision(str(dropped.span.get("spanId")), dropped.agent or kept.agent, False, why))
    return calls


def _delivered(calls: list[Call], spans: Sequence[Span], diagnostics: RolloutDiagnostics) -> list[Call]:
    """The calls whose answer reached the agent. The policy gateway records every answer it gave, under the traceparent
    of the agent's call; when the agent's client retried (a connection cut mid-answer, a timeout), that call holds
    one answer and the gateway two or more: the others were never read, shaped nothing, and are not trained. Only
    where the gateway recorded the answer the call received too: a dialect or a framework that names its answer
    anew leaves its calls as they were."""
    by_id = {span.get("spanId"): span for span in spans}
    answered: dict[Any, set[Any]] = {}  # calling span -> the response ids recorded under it
    for span in spans:
        attributes = span.get("attributes") or {}
        is_llm = attributes.get(semconv.GEN_AI_OPERATION_NAME) in semconv.LLM_OPERATIONS
        if is_llm and (caller := _calling_llm_span(span, by_id)) is not None:
            answered.setdefault(caller.get("spanId"), set()).add(attributes.get(semconv.GEN_AI_RESPONSE_ID))
    kept = []
    for call in calls:
        caller = _calling_llm_span(call.span, by_id)
        received = (caller.get("attributes") or {}).get(semconv.GEN_AI_RESPONSE_ID) if caller is not None else None
        if (
            caller is not None
            and received
            and call.response_id not in (None, received)
            and received in answered[caller.get("spanId")]
        ):
            diagnostics.undelivered_calls += 1
            why = ("undelivered", str(caller.get("spanId")), received)
            diagnostics.calls.append(CallDecision(str(call.span.get("spanId")), call.agent, False, why))
            continue
        kept.append(call)
    return kept


def _calling_llm_span(span: Span, by_id: dict[Any, Span]) -> Span | None:
    """The nearest LLM span above `span` in its trace (the agent's own record of the call the gateway served)."""
    parent = by_id.get(span.get("parentSpanId"))
    for _ in range(64):  # no trace is deeper; a cycle in bad data must not hang the adapter
        if parent is None:
            return None
        if (parent.get("attributes") or {}).get(semconv.GEN_AI_OPERATION_NAME) in semconv.LLM_OPERATIONS:
            return parent
        parent = by_id.get(parent.get("parentSpanId"))
    return None


def _harness_join(llm_spans: Sequence[Span]) -> HarnessJoin | None:
    """The harness join (`adapters.harness_calls`) where some call names a conversation; None (no cost) otherwise."""
    if any(semconv.GEN_AI_CONVERSATION_ID in (span.get("attributes") or {}) for span in llm_spans):
        return join_harness_calls(llm_spans)
    return None


class _AgentAncestry:
    """The agent of a call whose span names none: the nearest agent span above it in the trace. A span recorded in
    another process (the policy gateway's, under the caller's `traceparent`) could not resolve its agent when it
    started; its caller's spans, in the same rollout, say it. The rollout's own agent span (the runner's) is not a
    sub-agent: a call under it and no other stays unnamed, as it was recorded."""

    def __init__(self, spans: Sequence[Span]) -> None:
        self._by_id = {span.get("spanId"): span for span in spans}

    def agent_of(self, span: Span) -> str | None:
        parent = self._by_id.get(span.get("parentSpanId"))
        for _ in range(256):  # a trace is no deeper; a cycle in bad data must not hang the adapter
            if parent is None:
                return None
            attributes = parent.get("attributes") or {}
            if semconv.AGL_ROLLOUT_AGENT_NAMES in attributes:
                return None
            name = attributes.get(semconv.GEN_AI_AGENT_NAME)
            if name and attributes.get(semconv.GEN_AI_OPERATION_NAME) not in semconv.LLM_OPERATIONS:
                return str(name)
            parent = self._by_id.get(parent.get("parentSpanId"))
        return None


def span_with_messages(span: Span, copies: Sequence[Span] = ()) -> Span:
    """Of a call's spans (the one the adapter kept and its copies: the gateway's, the client's), the first that
    recorded the messages; the kept one when none did. The gateway's copy, kept for its ids, holds none. Messages
    recorded in the call's operation-details event (a span event, or a log record the collector attached to the
    span: ADK's newer path) are read as if on the span (the span returned carries them in its attributes)."""
    for candidate in (span, *copies):
        attributes = _content_attributes(candidate)
        if attributes.get(semconv.GEN_AI_OUTPUT_MESSAGES):
            return candidate if attributes is candidate.get("attributes") else {**candidate, "attributes": attributes}
    return span


# What a call's operation-details event may hold: read as if on its span.
CONTENT_KEYS = (semconv.GEN_AI_INPUT_MESSAGES, semconv.GEN_AI_OUTPUT_MESSAGES, semconv.GEN_AI_TOOL_DEFINITIONS)


def _content_attributes(span: Span) -> dict[str, Any]:
    attributes = span.get("attributes") or {}
    if semconv.GEN_AI_OUTPUT_MESSAGES in attributes:
        return attributes
    for event in span.get("events") or ():
        found = event.get("attributes") or {}
        if event.get("name") == semconv.GEN_AI_CONTENT_EVENT and semconv.GEN_AI_OUTPUT_MESSAGES in found:
            return {**attributes, **{key: found[key] for key in CONTENT_KEYS if key in found}}
    return attributes


def rollout_agent_names(spans: Sequence[Span]) -> list[str]:
    """The names of the agent the runner ran for this rollout (its `invoke_agent` span carries them)."""
    for span in spans:
        names = (span.get("attributes") or {}).get(semconv.AGL_ROLLOUT_AGENT_NAMES)
        if names:
            return [str(name) for name in names]
    return []


def _quality(call: Call) -> int:
    has_ids = call.prompt is not None and call.response is not None
    return 2 * has_ids + (has_ids and call.complete)


__all__ = ["CONTENT_KEYS", "Call", "llm_calls", "rollout_agent_names", "span_with_messages"]
