"""Rewards from a reward model inside a rollout, recorded where they came from.

    async with RewardModelClient(url) as judge:
        reply = await client.chat.completions.create(...)                 # the call to be judged
        score = await agl.score_answer(judge, [*messages, answer_message], response_id=reply.id)

`score_answer` asks the reward model, records the call as a `score {model}` span (the model's URL and version,
the request's outcome, `agl.reward.response_id` = the judged call's `gen_ai.response.id`) and, inside it, the score
as an `agl.reward` whose `agl.reward.source` is the model's name and whose `agl.reward.response_id` links it to the
call it judged, the link the adapter uses to give that call the reward. `weighted_reward` combines sources (an
execution check and a reward model, say) into the `primary` reward trainers optimise, each part kept as a named
reward with its source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace

from lightning_otel import semconv
from lightning_otel.capture.reward import emit_reward
from lightning_otel.capture.tracer import get_tracer
from lightning_otel.rewards.client import RewardModelClient

REWARD_MODEL_REWARD = "reward_model"


async def score_answer(
    judge: RewardModelClient,
    messages: Sequence[dict[str, Any]],
    *,
    response_id: str | None = None,
    name: str = REWARD_MODEL_REWARD,
    emit: bool = True,
) -> float:
    """The reward model's score of the conversation's last (assistant) message, recorded as a span and, unless
    `emit=False` (to combine it with other sources first), as an `agl.reward` named `name`."""
    model = await judge.name()
    attributes: dict[str, Any] = {semconv.AGL_REWARD_MODEL_URL: judge.base_url, semconv.AGL_REWARD_SOURCE: model}
    if response_id:
        attributes[semconv.AGL_REWARD_RESPONSE_ID] = response_id
    with get_tracer().start_as_current_span(
        semconv.REWARD_MODEL_SPAN_PREFIX + model, kind=trace.SpanKind.CLIENT, attributes=attributes
    ) as span:
        value = await judge.score_one(messages)
        span.set_attribute(semconv.AGL_REWARD_MODEL_SCORE, value)
        if judge.model_version:
            span.set_attribute(semconv.AGL_REWARD_MODEL_VERSION, judge.model_version)
        if emit:
            emit_reward(value, name=name, response_id=response_id, source=model)
    return value


def weighted_reward(
    parts: Mapping[str, float],
    weights: Mapping[str, float],
    *,
    sources: Mapping[str, str] | None = None,
    response_id: str | None = None,
    emit: bool = True,
) -> float:
    """`primary` = sum(weights[k] * parts[k]); every part is also recorded as a reward of its own name (with its
    source), so a trace shows what the primary reward was made of. A part without a weight is an error."""
    missing = sorted(set(parts) - set(weights))
    if missing:
        raise ValueError(f"no weight for the reward part(s) {missing}: give every part a weight (0 to ignore it)")
    if semconv.DEFAULT_REWARD_NAME in parts:
        raise ValueError(f"{semconv.DEFAULT_REWARD_NAME!r} is the combined reward: name the parts otherwise")
    total = sum(weights[key] * float(value) for key, value in parts.items())
    if emit:
        rewards = {semconv.DEFAULT_REWARD_NAME: total, **parts}
        origin = {
            **(sources or {}),
            semconv.DEFAULT_REWARD_NAME: "weighted:" + ",".join(f"{key}*{weights[key]:g}" for key in parts),
        }
        emit_reward(rewards, response_id=response_id, source=origin)
    return total
