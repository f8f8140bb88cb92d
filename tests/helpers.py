"""Helpers shared by the tests."""

from __future__ import annotations

import socket
from typing import Any

from lightning_otel import semconv


def free_port() -> int:
    """A TCP port free on loopback now (for a server that must be told its port before it starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def assert_ids_match_server_response(span: Any, response: dict[str, Any], choice: int = 0) -> None:
    """The span's token ids and logprobs equal exactly what the server sent (a vLLM-format JSON body)."""
    a = attrs(span)
    prompt_ids = response.get("prompt_token_ids") or response["choices"][choice].get("prompt_token_ids")
    assert list(a[semconv.AGL_PROMPT_TOKEN_IDS]) == prompt_ids
    key = semconv.AGL_RESPONSE_TOKEN_IDS if choice == 0 else semconv.AGL_CHOICE_RESPONSE_TOKEN_IDS.format(index=choice)
    assert list(a[key]) == response["choices"][choice]["token_ids"]
