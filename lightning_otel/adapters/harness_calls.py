"""A harness's own record of an LLM call joined to the gateway's record of the same request.

A CLI harness (Claude Code) cannot be instrumented and sends no `traceparent`, but it exports its own spans: one
per model request (`claude_code.llm_request`), naming the agent that made it (the main thread or a sub-agent) and
the conversation it belongs to (`gen_ai.conversation.id`: the session, or the sub-agent's own id). The policy
gateway records the same request with its token ids, and the conversation id from the request's headers
(`serving.conversation_headers`). Within one rollout, a gateway call is the harness call of the same conversation
whose time span holds it (the harness's span opens before the HTTP request and closes after its last byte); when
clocks disagree (another machine) and both sides counted the same number of calls, the k-th of each is joined.

The gateway call then takes the harness's agent name, so `agent_match="^Explore$"` selects a Claude Code sub-agent's
calls; the harness span becomes a copy of that call (not a call of its own without token ids). A gateway call that
names a conversation no harness span explains keeps no agent from it, and says why (`unjoined`).

Agent names: a span's `gen_ai.agent.name` when it has one; else Claude Code's query source: `agent.builtin.Explore`
and `agent.custom.reviewer` name their sub-agent (`Explore`, `reviewer`), the main thread (`sdk` in print mode,
`repl_main_thread` interactive) is `main`, and any other source (`compact`, ...) is named as sent.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from lightning_otel import semconv
from lightning_otel.flat_span import Span

MAIN_THREAD = "main"
_MAIN_SOURCES = frozenset({"sdk", "repl_main_thread", "print", "main"})
_QUERY_SOURCES = ("query_source", "query_source_safe")  # Claude Code's; the second when the first is withheld
_CLOCK_SLACK_NS = 2_000_000  # the two processes read one clock; their timestamps round differently


@dataclass(slots=True)
class HarnessJoin:
    """Gateway span id -> (agent name, the harness span); the harness spans joined; calls left unexplained."""

    agents: dict[str, tuple[str, Span]] = field(default_factory=dict)
    joined: set[str] = field(default_factory=set)  # harness span ids that are copies of a gateway call
    unjoined: dict[str, str] = field(default_factory=dict)  # span id -> why it has no partner (gateway or harness)


def harness_agent_name(attributes: dict[str, object]) -> str | None:
    """The agent a harness's LLM span names (see the module docstring), or None."""
    if name := attributes.get(semconv.GEN_AI_AGENT_NAME):
        return str(name)
    source = next((str(attributes[key]) for key in _QUERY_SOURCES if attributes.get(key)), None)
    if source is None:
        return None
    if source.startswith("agent."):
        return source.split(".", 2)[-1] or source
    return MAIN_THREAD if source in _MAIN_SOURCES else source


def join_harness_calls(llm_spans: Sequence[Span]) -> HarnessJoin:
    """Join the rollout's gateway calls (token ids and a conversation id) to its harness calls (a conversation id,
    no token ids), conversation by conversation."""
    join = HarnessJoin()
    recorded: dict[str, list[Span]] = defaultdict(list)  # conversation -> gateway calls
    harness: dict[str, list[Span]] = defaultdict(list)  # conversation -> harness calls
    for span in llm_spans:
        attributes = span.get("attributes") or {}
        conversation = attributes.get(semconv.GEN_AI_CONVERSATION_ID)
        if not conversation:
            continue
        side = recorded if semconv.AGL_RESPONSE_TOKEN_IDS in attributes else harness
        side[str(conversation)].append(span)
    for conversation, calls in recorded.items():
        calls.sort(key=_start)
        candidates = sorted(harness.get(conversation, ()), key=_start)
        pairs = _pairs_by_time(calls, candidates)
        if pairs is None and len(calls) == len(candidates):  # clocks apart: the same count in the same order
            pairs = list(zip(calls, candidates, strict=True))
        if pairs is None:
            why = (f"no harness span of conversation {conversation!r} holds this call in time"
                   if candidates else f"no harness span names conversation {conversation!r}")  # fmt: skip
            join.unjoined.update((str(call.get("spanId")), why) for call in calls)
            continue
        for call, own in pairs:
            join.joined.add(str(own.get("spanId")))
            if name := harness_agent_name(own.get("attributes") or {}):
                join.agents[str(call.get("spanId"))] = (name, own)
    for conversation, spans in harness.items():
        for own in spans:
            if str(own.get("spanId")) not in join.joined:
                join.unjoined[str(own.get("spanId"))] = (
                    f"the gateway recorded no call of conversation {conversation!r} that this harness span holds: a "
                    "request that failed before it answered, or one sent elsewhere"
                )
    return join


def _pairs_by_time(calls: list[Span], candidates: list[Span]) -> list[tuple[Span, Span]] | None:
    """Each call with the latest-starting free harness span that holds it in time (a retried request: the attempt
    that was answered); None unless every call finds one."""
    pairs: list[tuple[Span, Span]] = []
    taken: set[int] = set()
    for call in calls:
        start, end = _start(call), _end(call)
        holding = [index for index, own in enumerate(candidates) if index not in taken
                   and _start(own) - _CLOCK_SLACK_NS <= start and end <= _end(own) + _CLOCK_SLACK_NS]  # fmt: skip
        if not holding:
            return None
        taken.add(holding[-1])
        pairs.append((call, candidates[holding[-1]]))
    return pairs


def _start(span: Span) -> int:
    return int(span.get("startTimeUnixNano") or 0)


def _end(span: Span) -> int:
    return int(span.get("endTimeUnixNano") or 0)
