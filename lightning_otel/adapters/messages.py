"""Spans of a rollout in, OpenAI chat fine-tuning examples out: `TraceToMessages(agent_match=...)`.

It selects calls exactly as `TraceToTriplet` does (the same `agent_match` and deduplication) and needs message
content on the spans.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from lightning_otel import semconv
from lightning_otel.adapters.diagnostics import RolloutDiagnostics
from lightning_otel.adapters.llm_calls import llm_calls, rollout_agent_names, span_with_messages
from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.flat_span import Span


class TraceToMessages:
    """LLM calls -> OpenAI chat fine-tuning examples (`{"messages": [...]}`, one JSONL line each).

    Needs message content on the spans (`capture_content=True` or
    `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY`): each selected call's `gen_ai.input.messages`
    followed by its `gen_ai.output.messages` choice 0, and the tools the request offered as `"tools"` (OpenAI's
    fine-tuning format) when it offered any. Selection is `TraceToTriplet`'s (`agent_match`, dedupe);
    calls without content are counted in `calls_without_content`.
    """

    def __init__(self, agent_match: str | None = None) -> None:
        self._selector = TraceToTriplet(agent_match=agent_match)
        self.agent_match = agent_match
        self.calls_without_content = 0

    def adapt(self, spans: Iterable[Span]) -> list[dict[str, Any]]:
        spans = list(spans)
        diagnostics = RolloutDiagnostics(None)
        rollout_agents = rollout_agent_names(spans)
        examples = []
        for call in llm_calls(spans, diagnostics):
            if not self._selector.matches(call.agent, rollout_agents):
                continue
            messages = call_messages(call.span)
            if messages is None:
                self.calls_without_content += 1
                continue
            inputs, reply = messages
            tools = call_tools(call.span)
            examples.append({"messages": [*inputs, reply], **({"tools": tools} if tools else {})})
        return examples

    @staticmethod
    def to_jsonl(examples: Iterable[Mapping[str, Any]]) -> str:
        return "".join(json.dumps(example, ensure_ascii=False) + "\n" for example in examples)


def call_messages(span: Span) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """An LLM span's input messages and its reply (choice 0) in OpenAI's chat format; None without content. The
    messages may be on the span (JSON strings) or in its operation-details event or log record (JSON strings, or
    structured values as the newer conventions write them)."""
    attributes = span_with_messages(span).get("attributes") or {}
    try:
        inputs = _structured(attributes[semconv.GEN_AI_INPUT_MESSAGES])
        outputs = _structured(attributes[semconv.GEN_AI_OUTPUT_MESSAGES])
    except (KeyError, TypeError, ValueError):
        return None
    if not outputs or not isinstance(inputs, list):
        return None
    return [_openai_message(m) for m in inputs], _openai_message(outputs[0])


def call_tools(span: Span) -> list[dict[str, Any]] | None:
    """The function tools the call offered, in OpenAI's chat format (`{"type": "function", "function": {...}}`, the
    fields in the order the request gave them: a chat template renders them as the model saw them); None when the
    span recorded none (no tools, or no content)."""
    attributes = span_with_messages(span).get("attributes") or {}
    try:
        definitions = _structured(attributes[semconv.GEN_AI_TOOL_DEFINITIONS])
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(definitions, list):
        return None
    tools = []
    for definition in definitions:
        if isinstance(definition, dict) and definition.get("type") == "function":
            tools.append({"type": "function", "function": {k: v for k, v in definition.items() if k != "type"}})
        elif isinstance(definition, dict):
            tools.append(definition)  # a hosted tool, as the request gave it
    return tools or None


def _structured(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def _openai_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A GenAI semantic-convention message (`role` + `parts`) in OpenAI's chat format."""
    role = message.get("role")
    parts = message.get("parts") or []
    texts = [str(p.get("content") or "") for p in parts if p.get("type") == "text"]
    calls = [p for p in parts if p.get("type") == "tool_call"]
    responses = [p for p in parts if p.get("type") == "tool_call_response"]
    reasoning = [str(p.get("content") or "") for p in parts if p.get("type") == "reasoning"]
    if role == "tool" and responses:
        return {"role": "tool", "tool_call_id": responses[0].get("id"), "content": responses[0].get("response") or ""}
    result: dict[str, Any] = {"role": role, "content": "".join(texts) if texts else None}
    if reasoning:  # vLLM's field for a reasoning parser's output
        result["reasoning_content"] = "".join(reasoning)
    if calls:
        result["tool_calls"] = [
            {
                "id": c.get("id"),
                "type": "function",
                "function": {"name": c.get("name"), "arguments": c.get("arguments") or ""},
            }
            for c in calls
        ]
    return result


def genai_message(message: Mapping[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    """An OpenAI chat message as a GenAI semantic-convention message (`role` + `parts`): the inverse of the reading
    above, for spans written from another format (an imported ATIF trajectory)."""
    role = message.get("role")
    if role == "tool":
        part = {"type": "tool_call_response", "id": message.get("tool_call_id"), "response": message.get("content")}
        return {"role": "tool", "parts": [part]}
    parts: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        parts.append({"type": "reasoning", "content": message["reasoning_content"]})
    if message.get("content"):
        parts.append({"type": "text", "content": message["content"]})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append({"type": "tool_call", "id": call.get("id"), "name": function.get("name"),
                      "arguments": function.get("arguments")})  # fmt: skip
    result: dict[str, Any] = {"role": role, "parts": parts}
    if finish_reason is not None:
        result["finish_reason"] = finish_reason
    return result


def genai_tool_definitions(tools: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat tools in the conventions' shape (`gen_ai.tool.definitions`): the inverse of `call_tools`, for
    spans written from another format (an imported ATIF trajectory's `agent.tool_definitions`)."""
    definitions = []
    for tool in tools:
        function = tool.get("function")
        definitions.append({"type": "function", **function} if isinstance(function, Mapping) else dict(tool))
    return definitions
