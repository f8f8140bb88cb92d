"""Process rewards read from the traces: penalties for what a call's spans show went wrong, with no code in the agent.

    TraceToTriplet(agent_match="write", process_rewards={"tool_error": -0.5, "truncated": -0.2})

Each is a named reward with source "trace" (so the rollout view shows where it came from), credited to one LLM call
and counted in that call's return (and in the returns of the calls before it; see `lightning_otel.adapters.credit`):
- `tool_error`: a tool span (`gen_ai.operation.name=execute_tool`) that ended with ERROR status penalises the call
  that requested it: the call whose output messages hold the tool span's `gen_ai.tool.call.id`; without an id (or
  message content) on the spans, the latest call of the tool's agent (else of any agent) that started before the
  tool did.
- `truncated`: a call whose finish reason is `length` (the reply was cut at max_tokens).
- `call_error`: a call whose span ended with ERROR status (the request failed).
Opt-in: off unless a value is given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lightning_otel import semconv
from lightning_otel.flat_span import Span

TRACE_SOURCE = "trace"
STATUS_ERROR = 2  # OTLP's Status.code for ERROR


@dataclass(frozen=True, slots=True)
class ProcessRewards:
    tool_error: float | None = None
    truncated: float | None = None
    call_error: float | None = None

    @classmethod
    def from_config(cls, config: ProcessRewards | Mapping[str, float] | None) -> ProcessRewards | None:
        if config is None or isinstance(config, ProcessRewards):
            return config
        unknown = set(config) - {"tool_error", "truncated", "call_error"}
        if unknown:
            raise ValueError(f"unknown process reward(s) {sorted(unknown)}: use tool_error, truncated, call_error")
        for name, value in config.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"process reward {name!r} must be a number, got {value!r}")
        return cls(**{name: float(value) for name, value in config.items()})

    def as_config(self) -> dict[str, float]:
        return {name: value for name in ("tool_error", "truncated", "call_error")
                if (value := getattr(self, name)) is not None}  # fmt: skip


def _failed(span: Span) -> bool:
    return (span.get("status") or {}).get("code") == STATUS_ERROR


def _tool_call_ids(span: Span) -> set[str]:
    """The tool-call ids a call's recorded output messages requested (empty without message content)."""
    raw = (span.get("attributes") or {}).get(semconv.GEN_AI_OUTPUT_MESSAGES)
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)  # the stdlib's: adapters run where only the contract is installed (runners)
        except json.JSONDecodeError:
            return set()
    ids: set[str] = set()
    for message in raw if isinstance(raw, list) else ():
        for part in (message.get("parts") or ()) if isinstance(message, dict) else ():
            if isinstance(part, dict) and part.get("type") == "tool_call" and part.get("id"):
                ids.add(str(part["id"]))
    return ids


def _requester(tool: Span, calls: Sequence[Span]) -> Span | None:
    """The LLM call that asked for this tool run (calls in start order)."""
    attributes = tool.get("attributes") or {}
    call_id = attributes.get(semconv.GEN_AI_TOOL_CALL_ID)
    if call_id:
        for call in calls:
            if str(call_id) in _tool_call_ids(call):
                return call
    started = int(tool.get("startTimeUnixNano") or 0)
    before = [c for c in calls if int(c.get("startTimeUnixNano") or 0) <= started]
    agent = attributes.get(semconv.GEN_AI_AGENT_NAME)
    same_agent = [c for c in before if (c.get("attributes") or {}).get(semconv.GEN_AI_AGENT_NAME) == agent]
    candidates = same_agent if agent and same_agent else before
    return candidates[-1] if candidates else None


def trace_rewards(
    settings: ProcessRewards, spans: Sequence[Span], calls: Sequence[Span]
) -> list[tuple[str, str, float]]:
    """(span id of the credited call, reward name, value) for every process reward the spans show; `calls`: the
    rollout's LLM call spans in start order (one per response)."""
    found: list[tuple[str, str, float]] = []
    for call in calls:
        attributes: dict[str, Any] = call.get("attributes") or {}
        if settings.truncated is not None and "length" in (
            attributes.get(semconv.GEN_AI_RESPONSE_FINISH_REASONS) or ()
        ):
            found.append((str(call.get("spanId")), "truncated", settings.truncated))
        if settings.call_error is not None and _failed(call):
            found.append((str(call.get("spanId")), "call_error", settings.call_error))
    if settings.tool_error is not None:
        for span in spans:
            attributes = span.get("attributes") or {}
            if attributes.get(semconv.GEN_AI_OPERATION_NAME) != semconv.OP_EXECUTE_TOOL or not _failed(span):
                continue
            requester = _requester(span, calls)
            if requester is not None:
                found.append((str(requester.get("spanId")), "tool_error", settings.tool_error))
    return found
