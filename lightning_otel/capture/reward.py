"""`emit_reward`: the `agl.reward` span (zero duration, child of the current span)."""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Iterator, Mapping
from contextvars import ContextVar

from opentelemetry import trace

from lightning_otel import semconv
from lightning_otel.capture.rollout_context import current_rollout
from lightning_otel.capture.tracer import get_tracer

# The runner records what the agent emitted, to tell "returned a reward" from "emitted its own" (and both at once).
_recorded: ContextVar[list[tuple[str, float]] | None] = ContextVar("agl_recorded_rewards", default=None)


@contextlib.contextmanager
def recording_rewards() -> Iterator[list[tuple[str, float]]]:
    """Collect (name, value) of every reward emitted inside (threads and tasks that copy the context included)."""
    emitted: list[tuple[str, float]] = []
    token = _recorded.set(emitted)
    try:
        yield emitted
    finally:
        _recorded.reset(token)


class RolloutContextError(RuntimeError):
    """A rollout-scoped operation ran outside `lightning_otel.rollout_context(...)`."""


def _as_reward(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"reward {name!r} must be a number, got {type(value).__name__}: {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"reward {name!r} must be finite, got {number}")
    return number


def emit_reward(
    value: float | Mapping[str, float] | None = None,
    *,
    name: str = semconv.DEFAULT_REWARD_NAME,
    primary_key: str | None = None,
    response_id: str | None = None,
    require_rollout: bool = True,
    reward: float | Mapping[str, float] | None = None,
    source: str | Mapping[str, str] | None = None,
) -> None:
    """Record a reward for the current rollout.

    Args:
        value: a number, or a dict of named rewards (one `agl.reward` span each; the dict keys are the names).
        name: the reward's name for a single value (default `primary`, what trainers optimise).
        primary_key: with a dict, the key whose value is also recorded as `primary` (Agent Lightning's form).
        response_id: the `gen_ai.response.id` of the LLM call this rewards; without it the adapter gives the
            reward to the latest preceding unrewarded call.
        require_rollout: raise `RolloutContextError` outside a rollout (default); False emits anyway.
        reward: Agent Lightning's name for `value` (deprecated here: pass the value positionally).
        source: what gave the reward (`agl.reward.source`: a reward model's name, "execution", ...); with a dict
            of rewards, a dict of sources by reward name.
    """
    if reward is not None:
        if value is not None:
            raise TypeError("emit_reward() got both a value and reward=: pass one")
        warnings.warn("emit_reward(reward=...) is Agent Lightning's spelling: use emit_reward(value)",
                      DeprecationWarning, stacklevel=2)  # fmt: skip
        value = reward
    if value is None:
        raise TypeError("emit_reward() needs a value: a number or a dict of named rewards")
    if require_rollout and current_rollout() is None:
        raise RolloutContextError(
            "emit_reward() was called outside lightning_otel.rollout_context(...): the reward would belong to "
            "no rollout. Run the agent inside a rollout (the trainer's runners do), or pass "
            "require_rollout=False to record it anyway."
        )
    if isinstance(value, Mapping):
        rewards = {str(k): _as_reward(str(k), v) for k, v in value.items()}
        if primary_key is not None:
            if primary_key not in rewards:
                raise ValueError(f"primary_key {primary_key!r} is not a key of the rewards {sorted(rewards)}")
            rewards = {semconv.DEFAULT_REWARD_NAME: rewards[primary_key], **rewards}
    else:
        if primary_key is not None:
            raise TypeError("primary_key names a key of a dict of rewards; this reward is a single number")
        rewards = {name: _as_reward(name, value)}
    if not rewards:
        raise ValueError("emit_reward() got an empty dict of rewards")
    tracer = get_tracer()
    now = time.time_ns()
    recorded = _recorded.get()
    if recorded is not None:
        recorded.extend(rewards.items())
    for reward_name, amount in rewards.items():
        attributes: dict[str, str | float] = {
            semconv.AGL_REWARD_VALUE: amount,
            semconv.AGL_REWARD_NAME: reward_name,
        }
        if response_id:
            attributes[semconv.AGL_REWARD_RESPONSE_ID] = response_id
        origin = source.get(reward_name) if isinstance(source, Mapping) else source
        if origin:
            attributes[semconv.AGL_REWARD_SOURCE] = str(origin)
        span = tracer.start_span(
            semconv.REWARD_SPAN_NAME, kind=trace.SpanKind.INTERNAL, attributes=attributes, start_time=now
        )
        span.end(end_time=now)
