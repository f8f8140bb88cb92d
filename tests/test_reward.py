"""`emit_reward` produces the `agl.reward` span."""

from __future__ import annotations

import pytest

import lightning_otel
from lightning_otel import semconv
from tests.helpers import attrs


def test_reward_span_shape(agl_spans):
    tracer = lightning_otel.get_tracer()
    with lightning_otel.rollout_context("ro-r", "at-r"), tracer.start_as_current_span("episode") as parent:
        lightning_otel.emit_reward(0.75, response_id="chatcmpl-1")
    (reward,) = agl_spans.reward_spans()
    a = attrs(reward)
    assert a[semconv.AGL_REWARD_VALUE] == 0.75
    assert a[semconv.AGL_REWARD_NAME] == "primary"
    assert a[semconv.AGL_REWARD_RESPONSE_ID] == "chatcmpl-1"
    assert a[semconv.AGL_ROLLOUT_ID] == "ro-r"
    assert reward.start_time == reward.end_time
    assert reward.parent.span_id == parent.get_span_context().span_id


def test_dict_of_rewards_makes_one_span_each(agl_spans):
    with lightning_otel.rollout_context("ro-d"):
        lightning_otel.emit_reward({"accuracy": 1, "format": 0.5})
    rewards = {attrs(s)[semconv.AGL_REWARD_NAME]: attrs(s)[semconv.AGL_REWARD_VALUE] for s in agl_spans.reward_spans()}
    assert rewards == {"accuracy": 1.0, "format": 0.5}


def test_outside_a_rollout_is_a_clear_error_unless_opted_out(agl_spans):
    with pytest.raises(lightning_otel.RolloutContextError, match=r"outside lightning_otel\.rollout_context"):
        lightning_otel.emit_reward(1.0)
    lightning_otel.emit_reward(1.0, require_rollout=False)
    assert len(agl_spans.reward_spans()) == 1


@pytest.mark.parametrize("bad", ["1.0", None, True, float("nan"), float("inf")])
def test_bad_values_are_rejected(bad):
    with lightning_otel.rollout_context("ro-x"), pytest.raises((TypeError, ValueError)):
        lightning_otel.emit_reward(bad)
