"""The run's sampling, enforced on every request the policy gateway forwards, whatever the agent asked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REPLY_BUDGETS = ("max_tokens", "max_completion_tokens")


def enforced_sampling(body: Mapping[str, Any], sampling: Mapping[str, Any]) -> dict[str, Any]:
    """The run's sampling for a request: enforced whatever the agent asked, except the reply budget, which is a cap:
    an agent that asks for fewer tokens than the run's `max_tokens` gets its fewer (both spellings set alike)."""
    enforced = dict(sampling)
    cap = enforced.get("max_tokens")
    asked = [body[key] for key in REPLY_BUDGETS
             if isinstance(body.get(key), int) and not isinstance(body.get(key), bool) and body[key] > 0]  # fmt: skip
    if isinstance(cap, int) and asked:
        enforced["max_tokens"] = min(cap, *asked)
        if "max_completion_tokens" in body:
            enforced["max_completion_tokens"] = enforced["max_tokens"]
    return enforced


__all__ = ["REPLY_BUDGETS", "enforced_sampling"]
