"""The APIs the policy gateway speaks, each in its own module that owns its request, its answer and its error shapes:
`openai_dialect` (chat and completions, passed through), `messages_dialect` (Anthropic's Messages) and
`responses_dialect` (OpenAI's Responses), the last two asked of the replica as chat completions.

A new dialect is a module with those functions and one entry in `TRANSLATED` (its path under /v1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lightning_otel.serving import messages_dialect, openai_dialect, responses_dialect

if TYPE_CHECKING:
    from starlette.responses import Response

    from lightning_otel.serving.context_limits import Overflow


@dataclass(frozen=True, slots=True)
class Translated:
    """A dialect spoken over replicas that speak chat: its path, and how a request and an answer cross."""

    path: str
    chat_request: Callable[[dict[str, Any]], dict[str, Any]]
    answer: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]  # (chat completion, request) -> answer
    events: Callable[[dict[str, Any]], Iterator[bytes]]  # the answer as the dialect's stream


TRANSLATED = {
    messages_dialect.DIALECT: Translated("messages", messages_dialect.chat_request, messages_dialect.message_response,
                                         messages_dialect.message_events),
    responses_dialect.DIALECT: Translated("responses", responses_dialect.chat_request,
                                          responses_dialect.response_object, responses_dialect.response_events),
}  # fmt: skip
# dialect -> its module (error shapes); the Responses API answers errors in OpenAI's shape
_MODULES = {openai_dialect.DIALECT: openai_dialect, messages_dialect.DIALECT: messages_dialect,
            responses_dialect.DIALECT: openai_dialect}  # fmt: skip


def error_response(dialect: str, status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    """An error in the shape of the dialect the agent speaks (its SDK parses it into its own exception)."""
    return _MODULES[dialect].error_response(status, message, headers)


def context_error_response(dialect: str, overflow: Overflow) -> Response:
    """A prompt over the model's context, in the words the dialect's harnesses act on (compaction)."""
    return _MODULES[dialect].context_error_response(overflow)


__all__ = ["TRANSLATED", "Translated", "context_error_response", "error_response"]
