"""What the test server's 'model' says: scripted replies (`Reply`, `ToolCall`), each tokenized into the ids it
'sampled' with deterministic logprobs (`Generation`), and what the server records of each request."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lightning_otel.testing.tokenizer import ChatTokenizer, render_tool_call


@dataclass
class ToolCall:
    name: str
    arguments: str = "{}"
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:12]}")


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass
class RecordedRequest:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class ServedCall:
    """What the server produced for one request (by response id): the ids a trainer must end up with."""

    prompt_token_ids: list[int]
    response_token_ids: list[list[int]]  # one list per choice
    headers: dict[str, str]


ReplySource = Callable[[dict[str, Any]], "str | Reply"]


def logprob(token_id: int, position: int) -> float:
    """Deterministic, distinct per (token, position): tests can compare values exactly."""
    return -round(((token_id * 7919 + position * 104729) % 997) / 100.0 + 0.01, 4)


class Generation:
    """One choice: the text the client sees and the token ids the 'model' sampled."""

    def __init__(self, tokenizer: ChatTokenizer, reply: Reply, max_tokens: int | None) -> None:
        self.reply = reply
        rendered = reply.content or ""
        for call in reply.tool_calls:
            rendered += render_tool_call(call.name, call.arguments)
        ids = [*tokenizer.encode(rendered), tokenizer.eos_token_id]
        self.finish_reason = "tool_calls" if reply.tool_calls else "stop"
        if max_tokens is not None and len(ids) > max_tokens:
            ids = ids[:max_tokens]
            self.finish_reason = "length"
        self.token_ids = ids
        self.logprobs = [logprob(t, i) for i, t in enumerate(ids)]
        if self.finish_reason == "length":
            self.text = tokenizer.decode([t for t in ids if t != tokenizer.eos_token_id])
        else:
            self.text = reply.content or ""


__all__ = ["Generation", "RecordedRequest", "Reply", "ReplySource", "ServedCall", "ToolCall", "logprob"]
