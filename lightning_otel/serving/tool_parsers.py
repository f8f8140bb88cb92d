"""Tool calls read from a model's own text, as vLLM's tool parsers read them (`--enable-auto-tool-choice
--tool-call-parser NAME`), so that our replicas answer a request with `tools` the way vLLM would.

`hermes` is vLLM's Hermes2ProToolParser: each `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the reply
is a call (an unclosed last one too, when its JSON is whole); the text before the first `<tool_call>` is the content
(None when empty). When any block is not a JSON object with a name, nothing is a call and the whole reply is content,
as vLLM does. The format is the one Qwen2.5's, Hermes' and our test tokenizer's templates render; it is the parser
the seeds' tutorials start vLLM with.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_PARSERS = ("hermes",)
_HERMES_START = "<tool_call>"
_HERMES_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """A reply as the chat API returns it: its content and its calls (OpenAI `tool_calls` entries)."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def tool_call_id() -> str:
    """vLLM's form of a call id."""
    return f"chatcmpl-tool-{uuid.uuid4().hex[:16]}"


def parse_hermes(text: str) -> ParsedReply:
    """The reply's calls and the content before them (see the module)."""
    if _HERMES_START not in text:
        return ParsedReply(text)
    calls = []
    for closed, unclosed in _HERMES_BLOCK.findall(text):
        try:
            call = json.loads(closed or unclosed)
            name, arguments = call["name"], call.get("arguments", {})
        except (ValueError, TypeError, KeyError):  # not JSON, not an object, no name: vLLM keeps the text
            return ParsedReply(text)
        if not isinstance(name, str):
            return ParsedReply(text)
        function = {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}
        calls.append({"id": tool_call_id(), "type": "function", "function": function})
    content = text[: text.find(_HERMES_START)]
    return ParsedReply(content or None, calls)


def parse_tool_calls(parser: str | None, text: str, body: dict[str, Any]) -> ParsedReply:
    """What a chat request gets back for `text`: its calls parsed when the request offers tools (and does not say
    `tool_choice: "none"`) and the replica has a parser; else the text alone."""
    if parser is None or not body.get("tools") or body.get("tool_choice") == "none":
        return ParsedReply(text)
    if parser == "hermes":
        return parse_hermes(text)
    raise ValueError(f"unknown tool call parser {parser!r}: one of {', '.join(TOOL_CALL_PARSERS)}")
