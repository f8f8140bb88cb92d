"""Request parameters that make vLLM (>= 0.10.2) return token ids and sampled logprobs.

Only sent to trainable endpoints (`settings.wants_token_ids`): strict servers such as api.openai.com reject
unknown fields. Values the caller set are never overridden.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CHAT = "chat"
COMPLETIONS = "completions"
RESPONSES = "responses"
MESSAGES = "messages"  # Anthropic's: no server returns token ids here (the policy gateway records them itself)

_PARAMS: dict[str, dict[str, Any]] = {
    # top_logprobs=0: the sampled token's logprob only, no alternatives to pay for.
    CHAT: {"return_token_ids": True, "logprobs": True, "top_logprobs": 0},
    # /completions takes an int: 0 = the sampled token's logprob only.
    COMPLETIONS: {"return_token_ids": True, "logprobs": 0},
    # The Responses API returns the token ids of input and output as raw message tokens.
    RESPONSES: {"enable_response_messages": True},
    MESSAGES: {},
}


def missing_token_id_params(kind: str, *bodies: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parameters for `kind` that none of `bodies` (json body, extra_body...) already sets."""
    params = _PARAMS[kind]
    return {key: value for key, value in params.items() if not any(body is not None and key in body for body in bodies)}
