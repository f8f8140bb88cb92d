"""OpenAI's Responses API as the test server answers it (`POST /v1/responses`): the request read as chat messages,
the answer as a Response object or its stream, with vLLM's token ids when asked."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from lightning_otel.testing.replies import Generation
from lightning_otel.testing.tokenizer import ChatTokenizer


def response_object(
    body: dict[str, Any],
    prompt_text: str,
    generation: Generation,
    tokenizer: ChatTokenizer,
    response_id: str,
    model: str,
) -> dict[str, Any]:
    """The Responses API object for one generation, vLLM's token ids (`input_messages`/`output_messages`) when the
    request enables them."""
    prompt_ids = tokenizer.encode(prompt_text)
    output: list[dict[str, Any]] = []
    if generation.reply.tool_calls:
        output.extend(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:8]}",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
                "status": "completed",
            }
            for call in generation.reply.tool_calls
        )
    else:
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:8]}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": generation.text, "annotations": []}],
            }
        )
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "model": body.get("model", model),
        "status": "incomplete" if generation.finish_reason == "length" else "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": len(prompt_ids),
            "output_tokens": len(generation.token_ids),
            "total_tokens": len(prompt_ids) + len(generation.token_ids),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }
    if body.get("enable_response_messages"):
        response["input_messages"] = [{"type": "raw_message_tokens", "message": prompt_text, "tokens": prompt_ids}]
        response["output_messages"] = [
            {
                "type": "raw_message_tokens",
                "message": tokenizer.decode(generation.token_ids),
                "tokens": generation.token_ids,
            }
        ]
    return response


async def response_stream(response: dict[str, Any], generation: Generation) -> AsyncIterator[str]:
    """The object as the Responses API streams it: created, the text as one delta, completed."""
    sequence = itertools.count()

    def event(kind: str, **payload: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': next(sequence), **payload})}\n\n"

    pending = {**response, "status": "in_progress", "output": []}
    pending.pop("input_messages", None)
    pending.pop("output_messages", None)
    yield event("response.created", response=pending)
    for item in response["output"]:
        if item["type"] == "message":
            yield event(
                "response.output_text.delta",
                item_id=item["id"],
                output_index=0,
                content_index=0,
                delta=generation.text,
                logprobs=[],
            )
    yield event(
        "response.completed" if response["status"] == "completed" else "response.incomplete",
        response=response,
    )


def chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses request's instructions and input as chat messages (what the template renders)."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    item = body.get("input")
    if isinstance(item, str):
        messages.append({"role": "user", "content": item})
    elif isinstance(item, list):
        for entry in item:
            if isinstance(entry, dict) and entry.get("role"):
                messages.append({"role": entry["role"], "content": entry.get("content")})
            elif isinstance(entry, dict) and entry.get("type") == "function_call_output":
                messages.append({"role": "tool", "content": str(entry.get("output", ""))})
    return messages


__all__ = ["chat_messages", "response_object", "response_stream"]
