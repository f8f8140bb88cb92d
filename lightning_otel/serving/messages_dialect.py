"""Anthropic's Messages API (`POST /v1/messages`) spoken by the policy gateway, over replicas that speak chat.

A Messages request becomes a chat completion request to the replica (system prompt, text, `tool_use` and
`tool_result` blocks, tools and tool choice, sampling), with token ids requested as for any call; the replica's
answer becomes a Message (text and `tool_use` blocks, stop reason, usage). The token ids are the replica's own: it
rendered the prompt and sampled the reply, so the call's span holds exactly what was trained on, as a chat call's
does (`agl.llm.dialect` names the dialect the agent spoke).

Streaming (`"stream": true`) answers with the event sequence the Anthropic SDKs read (`message_start`,
`content_block_start` / `_delta` / `_stop` per block, `message_delta`, `message_stop`), made from the replica's
whole answer: the client reads a correct stream, all of it at once when the reply is done (relaying the replica's
tokens as they come is not built yet).

`/v1/messages/count_tokens` is answered from the replica's own rendering (vLLM's `/tokenize`: the gateway's
`_count_tokens`); a prompt over the model's context is Anthropic's "prompt is too long" 400 (`context_limits`).
System messages between turns (Claude Code sends its environment so) are read as system messages; `thinking`
blocks a harness sends back are left out (no replica here thinks in them).

Not spoken yet: images and documents (a 400 says so), extended thinking.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse

if TYPE_CHECKING:
    from starlette.responses import Response

    from lightning_otel.serving.context_limits import Overflow

DIALECT = "anthropic.messages"
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use"}
_SAMPLING = ("max_tokens", "temperature", "top_p", "top_k")


class DialectError(ValueError):
    """A request this dialect cannot carry: answered with a 400 in the dialect's own error shape."""


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    """An error in the Messages API's shape (what the Anthropic SDKs parse into their exceptions)."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_kind(status: int) -> str:
    return {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
            429: "rate_limit_error", 503: "overloaded_error"}.get(status, "api_error")  # fmt: skip


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    """An HTTP error as the Anthropic SDKs read it (their exception for the status, with our message)."""
    return JSONResponse(error_body(message, error_kind(status)), status_code=status, headers=headers)


def context_error_response(overflow: Overflow) -> Response:
    """A prompt over the model's context, in the words Claude Code acts on (it compacts the conversation)."""
    return JSONResponse(error_body(overflow.anthropic_message(), "invalid_request_error"), status_code=400)


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """The chat completion request that asks the replica what `body` (a Messages request) asks."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise DialectError("messages: a non-empty list is required")
    if not isinstance(body.get("max_tokens"), int):
        raise DialectError("max_tokens: an integer is required")
    chat: list[dict[str, Any]] = []
    system = _text_of(body.get("system"), "system") if body.get("system") else None
    if system:
        chat.append({"role": "system", "content": system})
    for index, message in enumerate(messages):
        chat += _chat_messages(message, f"messages.{index}")
    request: dict[str, Any] = {"model": body.get("model"), "messages": chat}
    request.update({key: body[key] for key in _SAMPLING if body.get(key) is not None})
    if body.get("stop_sequences"):
        request["stop"] = list(body["stop_sequences"])
    if body.get("tools"):
        request["tools"] = [_chat_tool(tool, f"tools.{i}") for i, tool in enumerate(body["tools"])]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and request.get("tools"):
        kind = choice.get("type")
        if kind == "any":
            request["tool_choice"] = "required"
        elif kind == "tool":
            request["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        elif kind == "none":
            request["tool_choice"] = "none"
        if choice.get("disable_parallel_tool_use"):
            request["parallel_tool_calls"] = False
    return request


def count_request(body: dict[str, Any]) -> dict[str, Any]:
    """The chat request of a `count_tokens` body (which asks for no new tokens, so carries no `max_tokens`)."""
    return chat_request({**body, "max_tokens": 1})


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for index, block in enumerate(content):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise DialectError(f"{where}.{index}: only text blocks are read here, got {_type_of(block)}")
            texts.append(str(block.get("text") or ""))
        return "".join(texts)
    raise DialectError(f"{where}: a string or a list of text blocks is required")


def _type_of(block: Any) -> str:
    return repr(block.get("type")) if isinstance(block, dict) else type(block).__name__


def _chat_messages(message: Any, where: str) -> list[dict[str, Any]]:
    """One Messages message as chat messages: a user turn's tool results become `tool` messages (before its text),
    an assistant turn's `tool_use` blocks its `tool_calls`."""
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant", "system"):
        raise DialectError(f"{where}: a message with role 'user', 'assistant' or 'system' is required")
    role, content = message["role"], message.get("content")
    if role == "system":  # a system message between turns (Claude Code sends its environment so)
        return [{"role": "system", "content": _text_of(content, f"{where}.content")}]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise DialectError(f"{where}.content: a string or a list of content blocks is required")
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    tool_results: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "tool_use" and role == "assistant":
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            tool_calls.append({"id": block.get("id"), "type": "function",
                               "function": {"name": block.get("name"), "arguments": arguments}})  # fmt: skip
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue  # a reasoning model's state: no replica here thinks in these blocks
        elif kind == "tool_result" and role == "user":
            result = block.get("content")
            text = _text_of(result, f"{where}.content.{index}.content") if result is not None else ""
            if block.get("is_error"):
                text = f"Error: {text}"
            tool_results.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text})
        else:
            raise DialectError(f"{where}.content.{index}: a {_type_of(block)} block in a {role} message is not "
                               "spoken here (text, an assistant's tool_use, a user's tool_result)")  # fmt: skip
    turn: list[dict[str, Any]] = list(tool_results)
    if role == "assistant":
        assistant: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
        if tool_calls:
            assistant["tool_calls"] = tool_calls
        turn.append(assistant)
    elif texts or not tool_results:
        turn.append({"role": "user", "content": "".join(texts)})
    return turn


def _chat_tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or not tool.get("name"):
        raise DialectError(f"{where}: a tool with a name is required")
    if tool.get("type") not in (None, "custom"):
        raise DialectError(f"{where}: the server tool {tool['type']!r} is not spoken here (custom tools are)")
    function: dict[str, Any] = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def message_response(completion: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The Message answering `body`, from the replica's chat completion (its first choice)."""
    choice = (completion.get("choices") or [{}])[0]
    reply = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if reply.get("content"):
        content.append({"type": "text", "text": reply["content"]})
    for call in reply.get("tool_calls") or []:
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = {"_raw_arguments": function.get("arguments")}  # the model's words, kept, not dropped
        content.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": arguments})
    usage = completion.get("usage") or {}
    return {
        "id": completion.get("id"),  # the replica's: the gateway's span and an instrumented client's agree on it
        "type": "message",
        "role": "assistant",
        "model": body.get("model") or completion.get("model"),
        "content": content,
        "stop_reason": _STOP_REASONS.get(choice.get("finish_reason"), "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": usage.get("prompt_tokens", 0), "output_tokens": usage.get("completion_tokens", 0)},
    }


def message_events(message: dict[str, Any]) -> Iterator[bytes]:
    """A whole Message as the Messages API's stream of server-sent events."""

    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data}, ensure_ascii=False)}\n\n".encode()

    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None,
             "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 0}}  # fmt: skip
    yield event("message_start", {"message": start})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
            yield event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": block["text"]}})
        else:
            opened = {**block, "input": {}}
            yield event("content_block_start", {"index": index, "content_block": opened})
            partial = json.dumps(block["input"], ensure_ascii=False)
            yield event("content_block_delta",
                        {"index": index, "delta": {"type": "input_json_delta", "partial_json": partial}})  # fmt: skip
        yield event("content_block_stop", {"index": index})
    yield event("message_delta", {"delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                  "usage": {"output_tokens": usage["output_tokens"]}})  # fmt: skip
    yield event("message_stop", {})
