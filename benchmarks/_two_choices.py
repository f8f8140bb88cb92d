"""What the two-choice benchmark tasks share (credit_assignment, policy_per_agent, async_training): how a one-token
reply becomes a choice and the OpenAI client each runner process keeps."""

from __future__ import annotations

import functools
from typing import Any

MODELS = ("tiny", "smollm2")


def choice_of(reply: str) -> str:
    """left or right. The tiny policy cannot read, so a reply's first letter decides: a to m is left (about 40% of
    the untrained policy's replies), anything else right; SmolLM2 is read the same way, so both face one task."""
    first = reply.strip()[:1].lower()
    return "left" if "a" <= first <= "m" else "right"


@functools.cache
def chat_client(base_url: str, api_key: str) -> Any:
    """One OpenAI client per runner process and endpoint (a client per call costs its connection pool)."""
    from openai import OpenAI

    return OpenAI(base_url=base_url, api_key=api_key, max_retries=5)
