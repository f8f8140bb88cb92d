"""OpenAI's Responses API (`POST /v1/responses`) spoken by the policy gateway, over replicas that speak chat.

As for Anthropic's Messages (`messages_dialect`): the request becomes a chat completion request to the replica
(`instructions`, the `input` items: messages, the model's `function_call`s and their `function_call_output`s;
function tools and `tool_choice`; sampling), token ids requested; the replica's answer becomes a Response (a
`message` item with `output_text`, a `function_call` item per tool call, usage). The span is a chat call's, with
the replica's exact ids and `agl.llm.dialect: openai.responses`.

Stateless only: the whole conversation comes in `input` (what harnesses send with `store: false`);
`previous_response_id` is refused with a 400 that says so, as are tools other than functions (a namespace of
functions is read as its functions; tools OpenAI's servers run, `HOSTED_TOOLS`, are left out: no replica runs
them). `reasoning` items a harness sends back are left out of the prompt (they hold a reasoning model's encrypted
state, which a replica's chat template has no place for). Streaming answers with the event sequence the OpenAI SDK
reads, made from the replica's whole answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from lightning_otel.serving.messages_dialect import DialectError

DIALECT = "openai.responses"
# Tools OpenAI's servers run themselves: a replica cannot, so they are left out of the prompt (Codex declares
# web_search whatever its configuration; refusing the request would stop the harness)
HOSTED_TOOLS = frozenset({"web_search", "web_search_preview", "file_search", "code_interpreter", "computer_use_preview",
                          "image_generation", "mcp", "local_shell"})  # fmt: skip
_TEXT_PARTS = ("input_text", "output_text", "text")


def chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """The chat completion request that asks the replica what `body` (a Responses request) asks."""
    if body.get("previous_response_id"):
        raise DialectError("previous_response_id: responses are not kept here; send the whole conversation in input")
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": _text(body["instructions"], "instructions")})
    items = body.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
    elif isinstance(items, list) and items:
        for index, item in enumerate(items):
            _add_item(messages, item, f"input.{index}")
    else:
        raise DialectError("input: a string or a non-empty list of items is required")
    request: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if isinstance(body.get("max_output_tokens"), int):
        request["max_tokens"] = body["max_output_tokens"]
    request.update({key: body[key] for key in ("temperature", "top_p") if body.get(key) is not None})
    tools = [tool for i, tool in enumerate(body.get("tools") or []) for tool in _chat_tools(tool, f"tools.{i}")]
    if tools:
        request["tools"] = tools
        choice = body.get("tool_choice")
        if choice in ("auto", "none", "required"):
            request["tool_choice"] = choice
        elif isinstance(choice, dict) and choice.get("type") == "function":
            request["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        if body.get("parallel_tool_calls") is False:
            request["parallel_tool_calls"] = False
    return request


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for index, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise DialectError(f"{where}.{index}: only text parts are read here, got {kind!r}")
            texts.append(str(part.get("text") or ""))
        return "".join(texts)
    raise DialectError(f"{where}: a string or a list of text parts is required")


def _add_item(messages: list[dict[str, Any]], item: Any, where: str) -> None:
    if not isinstance(item, dict):
        raise DialectError(f"{where}: an item object is required")
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise DialectError(f"{where}: a message's role must be user, assistant, system or developer")
        messages.append({"role": "system" if role == "developer" else role,
                         "content": _text(item.get("content"), f"{where}.content")})  # fmt: skip
    elif kind == "function_call":
        call = {"id": item.get("call_id"), "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"}}  # fmt: skip
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":  # the same turn: its text, then its calls
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else _text(output, f"{where}.output")
        messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
    elif kind != "reasoning":  # a reasoning model's state: no place for it in the replica's template
        raise DialectError(f"{where}: a {kind!r} item is not spoken here (messages, function calls, their outputs)")


def _chat_tools(tool: Any, where: str) -> list[dict[str, Any]]:
    """A function tool as a chat tool; a namespace's function tools, each under its own name (the answer's
    `function_call` names its namespace again: `_namespaces`); a hosted tool (`web_search`, ...), none: a replica
    cannot run it, so the model is not told of it."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind == "namespace":
        inner = tool.get("tools")
        if not isinstance(inner, list):
            raise DialectError(f"{where}.tools: a namespace's list of tools is required")
        return [chat for i, each in enumerate(inner) for chat in _chat_tools(each, f"{where}.tools.{i}")]
    if kind in HOSTED_TOOLS:
        return []
    if kind != "function" or not tool.get("name"):
        raise DialectError(f"{where}: only function tools (and namespaces of them) are spoken here, got {kind!r}")
    function: dict[str, Any] = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object"}}
    if tool.get("description"):
        function["description"] = tool["description"]
    return [{"type": "function", "function": function}]


def _namespaces(body: dict[str, Any]) -> dict[str, str]:
    """Function name -> the namespace the request declared it in."""
    return {
        inner.get("name"): tool.get("name")
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and tool.get("type") == "namespace"
        for inner in tool.get("tools") or []
        if isinstance(inner, dict)
    }


def response_object(completion: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The Response answering `body`, from the replica's chat completion (its first choice)."""
    choice = (completion.get("choices") or [{}])[0]
    reply = choice.get("message") or {}
    response_id = str(completion.get("id"))  # the replica's: the gateway's span and a client's agree on it
    output: list[dict[str, Any]] = []
    if reply.get("content"):
        output.append({"type": "message", "id": f"msg_{response_id}", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": reply["content"], "annotations": []}]})  # fmt: skip
    namespaces = _namespaces(body)
    for index, call in enumerate(reply.get("tool_calls") or []):
        function = call.get("function") or {}
        item = {
            "type": "function_call",
            "id": f"fc_{response_id}_{index}",
            "call_id": call.get("id"),
            "name": function.get("name"),
            "arguments": function.get("arguments") or "{}",
            "status": "completed",
        }
        if function.get("name") in namespaces:
            item["namespace"] = namespaces[function["name"]]
        output.append(item)
    usage = completion.get("usage") or {}
    prompt, sampled = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    truncated = choice.get("finish_reason") == "length"
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(completion.get("created") or time.time()),
        "model": body.get("model") or completion.get("model"),
        "status": "incomplete" if truncated else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "error": None,
        "instructions": body.get("instructions"),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "usage": {"input_tokens": prompt, "output_tokens": sampled, "total_tokens": prompt + sampled,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
    }  # fmt: skip


def response_events(response: dict[str, Any]) -> Iterator[bytes]:
    """A whole Response as the Responses API's stream of server-sent events."""
    sequence = iter(range(1 << 30))

    def event(kind: str, /, **data: Any) -> bytes:  # positional: an event's own fields include `name`
        payload = {"type": kind, "sequence_number": next(sequence), **data}
        return f"event: {kind}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()

    pending = {**response, "status": "in_progress", "output": [], "incomplete_details": None}
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            part = item["content"][0]
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "content": []})  # fmt: skip
            yield event("response.content_part.added", item_id=item["id"], output_index=index, content_index=0,
                        part={**part, "text": ""})  # fmt: skip
            yield event("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0,
                        delta=part["text"], logprobs=[])  # fmt: skip
            yield event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                        text=part["text"], logprobs=[])  # fmt: skip
            yield event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                        part=part)  # fmt: skip
        else:
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "arguments": ""})  # fmt: skip
            yield event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                        delta=item["arguments"])  # fmt: skip
            yield event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                        arguments=item["arguments"], name=item["name"])  # fmt: skip
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed" if response["status"] == "completed" else "response.incomplete",
                response=response)  # fmt: skip
