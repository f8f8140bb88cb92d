"""Opt-in message content in the GenAI semantic-convention shape (`gen_ai.input.messages`/`output.messages`).

Messages become `{"role": ..., "parts": [...]}` with `text`, `tool_call` and `tool_call_response` parts (and, with the
latest conventions opted in, `generic` parts for other content blocks: `capture.conventions`), serialized as JSON
strings. Only called when content capture is on, so it costs nothing otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from lightning_otel import semconv
from lightning_otel.capture.settings import settings


def _field(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _text_of(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        texts = [str(_field(part, "text")) for part in content if _field(part, "text") is not None]
        return "".join(texts) if texts else None
    return str(content)


def _message_parts(message: Any) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    role = _field(message, "role")
    content = _field(message, "content")
    if isinstance(content, list):  # Anthropic's blocks: a user's tool results, an assistant's tool calls
        for block in content:
            kind = _field(block, "type")
            if kind == "tool_use":
                arguments = json.dumps(_field(block, "input") or {}, ensure_ascii=False, default=str)
                parts.append({"type": "tool_call", "id": _field(block, "id"), "name": _field(block, "name"),
                              "arguments": arguments})  # fmt: skip
            elif kind == "tool_result":
                parts.append({"type": "tool_call_response", "id": _field(block, "tool_use_id"),
                              "response": _text_of(_field(block, "content"))})  # fmt: skip
            elif _field(block, "text") is None and kind and settings.latest_genai:
                parts.append(_generic_part(str(kind), block))  # an image, a document...: kept, as the newest ask
    text = _text_of(content)
    if role == "tool":
        parts.append({"type": "tool_call_response", "id": _field(message, "tool_call_id"), "response": text})
        return parts
    if text:
        parts.append({"type": "text", "content": text})
    for call in _field(message, "tool_calls") or ():
        function = _field(call, "function")
        parts.append(
            {
                "type": "tool_call",
                "id": _field(call, "id"),
                "name": _field(function, "name"),
                "arguments": _field(function, "arguments"),
            }
        )
    return parts


def _generic_part(kind: str, block: Any) -> dict[str, Any]:
    """A content block no GenAI part type fits, as the latest conventions record it (`capture.conventions`): type
    `generic`, the provider's type in `generic_type`, its fields kept."""
    if isinstance(block, Mapping):
        fields = dict(block)
    elif hasattr(block, "model_dump"):
        fields = block.model_dump(mode="json", exclude_none=True)
    else:
        fields = dict(getattr(block, "__dict__", {}))
    return {"type": semconv.GENERIC_PART, "generic_type": kind, **{k: v for k, v in fields.items() if k != "type"}}


def input_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Chat `messages` (Anthropic's with their `system`), a completions `prompt`, or a Responses `instructions` +
    `input`."""
    messages = body.get("messages")
    if messages is not None:
        system = body.get("system")  # Anthropic's system prompt, beside the messages
        first = [{"role": "system", "parts": [{"type": "text", "content": _text_of(system)}]}] if system else []
        return [*first, *({"role": _field(m, "role"), "parts": _message_parts(m)} for m in messages)]
    result: list[dict[str, Any]] = []
    if body.get("instructions"):
        result.append({"role": "system", "parts": [{"type": "text", "content": str(body["instructions"])}]})
    prompt = body.get("prompt", body.get("input"))
    if isinstance(prompt, str):
        result.append({"role": "user", "parts": [{"type": "text", "content": prompt}]})
    elif isinstance(prompt, list):
        for item in prompt:
            if isinstance(item, str):
                result.append({"role": "user", "parts": [{"type": "text", "content": item}]})
            elif _field(item, "role") is not None:
                result.append({"role": _field(item, "role"), "parts": _message_parts(item)})
    return result


def tool_definitions(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The function tools a request offers, in the conventions' shape (`type`, `name`, `description`,
    `parameters`, in the order the request gave them): OpenAI chat's `{"type": "function", "function": {...}}` and
    legacy `functions`, Responses' flat functions, Anthropic's `input_schema`. Hosted tools (web search...) are
    kept with their own fields."""
    tools = body.get("tools") or body.get("functions")
    if not isinstance(tools, (list, tuple)):
        return []
    definitions = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            tool = _plain(tool)
        function = tool.get("function")
        if isinstance(function, Mapping):  # OpenAI chat
            definitions.append({"type": "function", **function})
        elif "input_schema" in tool:  # Anthropic: the same function, its schema under another name
            renamed = {("parameters" if key == "input_schema" else key): value for key, value in tool.items()}
            definitions.append({"type": "function", **renamed})
        elif "type" not in tool:  # legacy `functions`
            definitions.append({"type": "function", **tool})
        else:  # Responses' flat functions, and hosted tools as given
            definitions.append(dict(tool))
    return definitions


def _plain(value: Any) -> dict[str, Any]:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    return dict(getattr(value, "__dict__", {}))


def output_message(role: str, text: str | None, tool_calls: Iterable[Any], finish_reason: Any) -> dict[str, Any]:
    message = {"role": role, "content": text, "tool_calls": list(tool_calls)}
    return {"role": role, "parts": _message_parts(message), "finish_reason": finish_reason}


def to_json(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, ensure_ascii=False, default=str)
