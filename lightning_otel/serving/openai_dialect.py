"""OpenAI's chat and completions APIs as the policy gateway speaks them: passed through to the replica as sent
(the run's sampling and the token-id parameters added), errors in OpenAI's shape, which the Responses API shares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse

from lightning_otel import semconv
from lightning_otel.capture.token_id_params import CHAT, COMPLETIONS
from lightning_otel.serving.app_server import openai_error

if TYPE_CHECKING:
    from starlette.responses import Response

    from lightning_otel.serving.context_limits import Overflow

DIALECT = "openai"
# the paths under /v1 this dialect passes through: (the token-id parameters' kind, the span's operation)
ENDPOINTS = {"chat/completions": (CHAT, semconv.OP_CHAT), "completions": (COMPLETIONS, semconv.OP_TEXT_COMPLETION)}


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    """An HTTP error as the OpenAI SDK reads it."""
    return openai_error(status, message, headers)


def context_error_response(overflow: Overflow) -> Response:
    """A prompt over the model's context, as vLLM words it (what OpenAI-speaking harnesses recognise)."""
    return JSONResponse({"error": overflow.openai_error()}, status_code=400)


__all__ = ["DIALECT", "ENDPOINTS", "context_error_response", "error_response"]
