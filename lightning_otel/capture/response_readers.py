"""Reading what a server returned for an LLM call into the call (`LLMCall`): the pieces every API shares (a field of
a dict or an SDK object, a choice's token ids and text, logprobs, a streamed delta) and the two APIs besides chat
and completions: OpenAI's Responses (vLLM's `input_messages`/`output_messages` token ids) and Anthropic's Messages
(whole, or as stream events). Each reader takes the call it fills, as the call's own chat readers do."""

from __future__ import annotations

import json
from typing import Any, Protocol


def field(obj: Any, key: str) -> Any:
    """Read `key` from a dict or an attribute-style model (openai/litellm objects keep unknown fields)."""
    if obj is None:
        return None
    if isinstance(obj, dict):  # not `Mapping`: an ABC check per token would cost more than the read
        return obj.get(key)
    return getattr(obj, key, None)


class Choice:
    """One choice of a reply: its token ids, logprobs, finish reason, and (content on) text and tool calls."""

    __slots__ = ("finish_reason", "logprobs", "text", "token_ids", "tool_calls")

    def __init__(self) -> None:
        self.token_ids: list[int] | None = None
        self.logprobs: list[float] | None = None
        self.finish_reason: str | None = None
        self.text: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}


class CallReading(Protocol):
    """What a reader fills: the call being read (`LLMCall`)."""

    prompt_token_ids: list[int] | None
    response_status: str | None
    output_tokens: int | None
    capture_content: bool

    def choice_at(self, index: Any) -> Choice: ...

    def read_header(self, payload: Any) -> None: ...

    def read_usage(self, usage: Any) -> None: ...


def logprobs_of(logprobs: Any) -> list[float] | None:
    if logprobs is None:
        return None
    content = field(logprobs, "content")
    if content is not None:  # chat: [{token, logprob, ...}], one entry per sampled token
        if content and isinstance(content[0], dict):
            return [entry["logprob"] for entry in content]
        return [entry.logprob for entry in content]
    token_logprobs = field(logprobs, "token_logprobs")  # completions
    if token_logprobs is not None:
        return [float(value) for value in token_logprobs]
    return None


def accumulate_delta(choice: Choice, raw: Any) -> None:
    delta = field(raw, "delta")
    text = field(delta, "content") if delta is not None else field(raw, "text")
    if text:
        choice.text.append(str(text))
    for call in (field(delta, "tool_calls") or ()) if delta is not None else ():
        slot = choice.tool_calls.setdefault(
            field(call, "index") or 0, {"id": None, "function": {"name": None, "arguments": ""}}
        )
        if field(call, "id"):
            slot["id"] = field(call, "id")
        function = field(call, "function")
        if field(function, "name"):
            slot["function"]["name"] = field(function, "name")
        if field(function, "arguments"):
            slot["function"]["arguments"] += field(function, "arguments")


def read_response(call: CallReading, response: Any) -> None:
    """vLLM returns a Responses API call's token ids as `input_messages`/`output_messages` when asked."""
    call.read_header(response)
    status = field(response, "status")
    call.response_status = str(status) if status is not None else None
    input_messages = field(response, "input_messages")
    if input_messages and call.prompt_token_ids is None:
        call.prompt_token_ids = [t for m in input_messages for t in (field(m, "tokens") or ())]
    choice = call.choice_at(0)
    output_messages = field(response, "output_messages")
    if output_messages:
        choice.token_ids = [t for m in output_messages for t in (field(m, "tokens") or ())]
    choice.finish_reason = call.response_status
    if call.capture_content:
        for item in field(response, "output") or ():
            if field(item, "type") == "message":
                choice.text.extend(
                    str(field(part, "text")) for part in field(item, "content") or () if field(part, "text")
                )
            elif field(item, "type") == "function_call":
                choice.tool_calls[len(choice.tool_calls)] = {
                    "id": field(item, "call_id"),
                    "function": {"name": field(item, "name"), "arguments": field(item, "arguments")},
                }
    call.read_usage(field(response, "usage"))


def read_message(call: CallReading, message: Any) -> None:
    """Anthropic's Message: its id and model, its stop reason, its usage; with content on, its text and
    `tool_use` blocks (as tool calls whose arguments are the input's JSON)."""
    call.read_header(message)
    choice = call.choice_at(0)
    stop_reason = field(message, "stop_reason")
    choice.finish_reason = str(stop_reason) if stop_reason is not None else None
    if call.capture_content:
        for block in field(message, "content") or ():
            read_block(choice, block)
    call.read_usage(field(message, "usage"))


def read_block(choice: Choice, block: Any) -> None:
    kind = field(block, "type")
    if kind == "text" and field(block, "text"):
        choice.text.append(str(field(block, "text")))
    elif kind == "tool_use":
        arguments = json.dumps(field(block, "input") or {}, ensure_ascii=False, default=str)
        function = {"name": field(block, "name"), "arguments": arguments}
        choice.tool_calls[len(choice.tool_calls)] = {"id": field(block, "id"), "function": function}


def read_message_event(call: CallReading, event: Any) -> None:
    kind = field(event, "type")
    choice = call.choice_at(0)
    if kind == "message_start":
        message = field(event, "message")
        call.read_header(message)
        call.read_usage(field(message, "usage"))
    elif kind == "content_block_start" and call.capture_content:
        block = field(event, "content_block")
        if field(block, "type") == "tool_use":
            function = {"name": field(block, "name"), "arguments": ""}
            choice.tool_calls[field(event, "index") or 0] = {"id": field(block, "id"), "function": function}
    elif kind == "content_block_delta" and call.capture_content:
        delta = field(event, "delta")
        if field(delta, "type") == "text_delta" and field(delta, "text"):
            choice.text.append(str(field(delta, "text")))
        elif field(delta, "type") == "input_json_delta":
            slot = choice.tool_calls.get(field(event, "index") or 0)
            if slot is not None:
                slot["function"]["arguments"] += str(field(delta, "partial_json") or "")
    elif kind == "message_delta":
        stop_reason = field(field(event, "delta"), "stop_reason")
        if stop_reason is not None:
            choice.finish_reason = str(stop_reason)
        output_tokens = field(field(event, "usage"), "output_tokens")
        if isinstance(output_tokens, int):
            call.output_tokens = output_tokens


__all__ = ["CallReading", "Choice", "accumulate_delta", "field", "logprobs_of", "read_block", "read_message",
           "read_message_event", "read_response"]  # fmt: skip
