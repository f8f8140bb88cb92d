"""A request over the model's context, in the words each side uses: vLLM's 400 (which our replicas answer too) read
back into numbers, and said again in the dialect the agent speaks, in the words its harness acts on: Anthropic's
"prompt is too long" (Claude Code compacts its history when it reads it) and OpenAI's `context_length_exceeded`
code (Codex's). A harness whose prompt outgrows the context gets that error at once, never a hang."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# vLLM's two phrasings: with the completion's share (the request asked for more new tokens than are left), or the
# input alone over the context
_REQUESTED = re.compile(r"maximum context length is (\d+) tokens\. However, you requested \d+ tokens \((\d+) in the "
                        r"messages, (\d+) in the completion\)")  # fmt: skip
_INPUT = re.compile(r"maximum context length is (\d+) tokens\. However, your request has (\d+) input tokens")


@dataclass(frozen=True, slots=True)
class Overflow:
    maximum: int  # the model's context, in tokens
    prompt: int  # the prompt's tokens
    completion: int  # the new tokens asked for (0 when the prompt alone is over)

    def anthropic_message(self) -> str:
        """Anthropic's own words for the two cases (the Anthropic SDKs and Claude Code match them)."""
        if self.prompt > self.maximum or not self.completion:
            return f"prompt is too long: {self.prompt} tokens > {self.maximum} maximum"
        return (f"input length and `max_tokens` exceed context limit: {self.prompt} + {self.completion} > "
                f"{self.maximum}, decrease input length or `max_tokens` and try again")  # fmt: skip

    def openai_error(self) -> dict[str, Any]:
        """OpenAI's error object for it (`code: context_length_exceeded`, which Codex and the SDKs read)."""
        message = (f"Your input exceeds the context window of this model: {self.prompt} prompt tokens and "
                   f"{self.completion} new tokens asked for, over {self.maximum}.")  # fmt: skip
        return {"message": message, "type": "invalid_request_error", "param": "input",
                "code": "context_length_exceeded"}  # fmt: skip


def vllm_message(maximum: int, prompt: int, completion: int) -> str:
    """vLLM's words for a request over the model's context."""
    return (f"This model's maximum context length is {maximum} tokens. However, you requested {prompt + completion} "
            f"tokens ({prompt} in the messages, {completion} in the completion). Please reduce the length of the "
            "messages or completion.")  # fmt: skip


def overflow_in(text: str) -> Overflow | None:
    """The overflow a replica's error text describes, or None when it is another error."""
    if found := _REQUESTED.search(text):
        return Overflow(int(found[1]), int(found[2]), int(found[3]))
    if found := _INPUT.search(text):
        return Overflow(int(found[1]), int(found[2]), 0)
    return None
