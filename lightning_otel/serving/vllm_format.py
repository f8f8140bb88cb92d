"""OpenAI-compatible responses in vLLM's format, built in one place for every server of ours that plays the
inference server: the CPU replica (a real model) and the test server (scripted replies).

vLLM (>= 0.10.2) with `return_token_ids: true` adds the top-level `prompt_token_ids` (Chat Completions; on each choice
for Completions) and each choice's sampled `token_ids`; with `logprobs` each sampled token's logprob. Streams carry
the prompt ids on the first chunk and per-chunk token id deltas. Errors use OpenAI's error body.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

SSE_DONE = "data: [DONE]\n\n"


@dataclass(slots=True)
class SampledChoice:
    """One sampled choice: what the model produced, token by token.

    `token_texts` is read only when logprobs are returned and `pieces` only by the stream builders: servers fill them
    for those responses alone (decoding every prefix of a long reply is the costly part of a response)."""

    token_ids: list[int]
    logprobs: list[float]
    text: str | None  # the choice's visible text (None: a tool call without content)
    finish_reason: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI `tool_calls` entries (chat)
    token_texts: list[str] = field(default_factory=list)  # each token's own text (logprob entries)
    pieces: list[str] = field(default_factory=list)  # each token's share of the visible text (stream deltas)


def stream_pieces(decode: Callable[[list[int]], str], token_ids: Sequence[int], eos_token_id: int) -> list[str]:
    """Each token's delta of the decoded text, decoding prefixes so multi-token characters come out whole."""
    pieces, decoded, visible = [], "", []
    for token_id in token_ids:
        if token_id != eos_token_id:
            visible.append(token_id)
        text = decode(visible)
        pieces.append(text[len(decoded) :])
        decoded = text
    return pieces


def usage(prompt_ids: Sequence[int], choices: Sequence[SampledChoice]) -> dict[str, int]:
    completion = sum(len(choice.token_ids) for choice in choices)
    return {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": completion,
        "total_tokens": len(prompt_ids) + completion,
    }


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def _chat_logprobs(choice: SampledChoice, start: int = 0, stop: int | None = None) -> dict[str, Any]:
    entries = zip(choice.token_texts[start:stop], choice.logprobs[start:stop], strict=True)
    return {"content": [{"token": t, "logprob": lp, "bytes": None, "top_logprobs": []} for t, lp in entries]}


def _completion_logprobs(choice: SampledChoice) -> dict[str, Any]:
    tokens = choice.token_texts
    return {
        "tokens": tokens,
        "token_logprobs": choice.logprobs,
        "top_logprobs": [{} for _ in tokens],
        "text_offset": list(range(len(tokens))),
    }


def chat_completion(
    response_id: str,
    model: str,
    prompt_ids: list[int],
    choices: Sequence[SampledChoice],
    *,
    with_ids: bool,
    with_logprobs: bool,
) -> dict[str, Any]:
    out = []
    for index, choice in enumerate(choices):
        message: dict[str, Any] = {"role": "assistant", "content": choice.text}
        if choice.tool_calls:
            message["tool_calls"] = choice.tool_calls
        entry: dict[str, Any] = {
            "index": index,
            "message": message,
            "finish_reason": choice.finish_reason,
            "logprobs": _chat_logprobs(choice) if with_logprobs else None,
        }
        if with_ids:
            entry["token_ids"] = choice.token_ids
        out.append(entry)
    response: dict[str, Any] = {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": out,
        "usage": usage(prompt_ids, choices),
    }
    if with_ids:
        response["prompt_token_ids"] = prompt_ids
    return response


def chat_completion_chunks(
    response_id: str,
    model: str,
    prompt_ids: list[int],
    choices: Sequence[SampledChoice],
    *,
    with_ids: bool,
    with_logprobs: bool,
    include_usage: bool = False,
) -> Iterator[dict[str, Any]]:
    """A role chunk (with the prompt ids), one chunk per sampled token (tool calls on a choice's first), usage."""
    created = int(time.time())

    def chunk(entries: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": entries, **extra}  # fmt: skip

    first = [
        {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        for i in range(len(choices))
    ]
    yield chunk(first, **({"prompt_token_ids": prompt_ids} if with_ids else {}))
    for index, choice in enumerate(choices):
        last = len(choice.token_ids) - 1
        for position, token_id in enumerate(choice.token_ids):
            delta: dict[str, Any] = {"content": "" if choice.tool_calls else choice.pieces[position]}
            if choice.tool_calls and position == 0:
                delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(choice.tool_calls)]
            entry: dict[str, Any] = {
                "index": index,
                "delta": delta,
                "logprobs": _chat_logprobs(choice, position, position + 1) if with_logprobs else None,
                "finish_reason": choice.finish_reason if position == last else None,
            }
            if with_ids:
                entry["token_ids"] = [token_id]
            yield chunk([entry])
    if include_usage:
        yield chunk([], usage=usage(prompt_ids, choices))


def text_completion(
    response_id: str,
    model: str,
    prompt_ids: list[int],
    choices: Sequence[SampledChoice],
    *,
    with_ids: bool,
    with_logprobs: bool,
) -> dict[str, Any]:
    out = []
    for index, choice in enumerate(choices):
        entry: dict[str, Any] = {
            "index": index,
            "text": choice.text,
            "finish_reason": choice.finish_reason,
            "logprobs": _completion_logprobs(choice) if with_logprobs else None,
        }
        if with_ids:
            entry["prompt_token_ids"] = prompt_ids
            entry["token_ids"] = choice.token_ids
        out.append(entry)
    return {
        "id": response_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": out,
        "usage": usage(prompt_ids, choices),
    }


def text_completion_chunks(
    response_id: str,
    model: str,
    prompt_ids: list[int],
    choices: Sequence[SampledChoice],
    *,
    with_ids: bool,
    with_logprobs: bool,
) -> Iterator[dict[str, Any]]:
    """One chunk per sampled token; the prompt ids on each choice's first."""
    created = int(time.time())
    for index, choice in enumerate(choices):
        last = len(choice.token_ids) - 1
        for position, token_id in enumerate(choice.token_ids):
            entry: dict[str, Any] = {
                "index": index,
                "text": choice.pieces[position],
                "finish_reason": choice.finish_reason if position == last else None,
                "logprobs": (
                    {"tokens": [choice.token_texts[position]], "token_logprobs": [choice.logprobs[position]]}
                    if with_logprobs
                    else None
                ),
            }
            if with_ids:
                entry["token_ids"] = [token_id]
                if position == 0:
                    entry["prompt_token_ids"] = prompt_ids
            yield {"id": response_id, "object": "text_completion", "created": created, "model": model,
                   "choices": [entry]}  # fmt: skip
