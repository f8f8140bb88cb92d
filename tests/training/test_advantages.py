"""The loop's estimators: GRPO per rollout and per row (verl's formula), lone groups, negative weights, the reason a
step cannot learn, and the supervised weights."""

from __future__ import annotations

import statistics

import pytest

from lightning_otel.adapters.triplets import Triplet
from lightning_otel.training.loop.advantages import (
    GroupAdvantage,
    RewardThreshold,
    group_advantages,
    moves_policy,
)
from lightning_otel.training.loop.samples import Sample


def sample(rollout: str, reward: float, group: str = "g") -> Sample:
    triplet = Triplet([1], [2], [-0.1], [1], None, {}, "write", rollout, "a", [f"c-{rollout}"], ["s"])
    return Sample(triplet, reward, group)


def test_grpo_per_rollout_counts_each_rollout_once_and_divides_by_the_sample_std() -> None:
    samples = [sample("A", 1.0), sample("A", 1.0), sample("A", 1.0), sample("B", 0.0), sample("C", 0.5, "h")]
    GroupAdvantage().assign(samples)
    spread = statistics.stdev([1.0, 0.0])  # n - 1, as verl's torch.std
    assert [round(s.advantage, 6) for s in samples[:4]] == [round(0.5 / (spread + 1e-6), 6)] * 3 + [
        round(-0.5 / (spread + 1e-6), 6)
    ]
    assert samples[4].advantage == pytest.approx(0.5 / (1 + 1e-6))  # a lone rollout keeps its reward (verl)


def test_grpo_per_row_lets_a_many_call_rollout_pull_the_baseline() -> None:
    samples = [sample("A", 1.0), sample("A", 1.0), sample("A", 1.0), sample("B", 0.0)]
    GroupAdvantage(per="row", normalize_by_std=False).assign(samples)
    assert [s.advantage for s in samples] == [0.25, 0.25, 0.25, -0.75]  # mean over rows: 0.75


def test_negative_advantages_are_weighed_and_the_cookbook_gives_a_lone_rollout_nothing() -> None:
    samples = [sample("A", 1.0), sample("B", 0.0), sample("C", 0.0), sample("D", 3.0, "lone")]
    GroupAdvantage(normalize_by_std=False, negative_weight=0.25, lone="zero").assign(samples)
    assert [s.advantage for s in samples] == pytest.approx([2 / 3, -1 / 12, -1 / 12, 0.0])
    with pytest.raises(ValueError, match="negative_advantage_weight"):
        GroupAdvantage(negative_weight=2.0)


def test_a_step_whose_groups_all_scored_alike_cannot_move_the_policy_and_says_why() -> None:
    estimator = GroupAdvantage()
    samples = [sample("A", 1.0), sample("B", 1.0), sample("C", 0.0, "h"), sample("D", 0.0, "h")]
    estimator.assign(samples)
    assert not moves_policy(samples, "advantage")
    assert "every group's rewards were equal (2 of 2 groups)" in estimator.nothing_to_learn(samples)
    samples.append(sample("E", 1.0, "h"))
    estimator.assign(samples)
    assert moves_policy(samples, "advantage")


def test_group_advantages_is_verls_grpo_formula() -> None:
    rewards = {"a": 0.2, "b": 0.9, "c": 0.4, "d": 7.0}
    groups = {"a": "g", "b": "g", "c": "g", "d": "solo"}
    got = group_advantages(rewards, groups)
    mean, std = statistics.fmean([0.2, 0.9, 0.4]), statistics.stdev([0.2, 0.9, 0.4])
    assert got["b"] == pytest.approx((0.9 - mean) / (std + 1e-6)) and got["d"] == pytest.approx(7.0 / (1 + 1e-6))


def test_reward_threshold_weighs_the_samples_of_good_rollouts_and_counts_them() -> None:
    samples = [sample("A", 1.0), sample("B", 0.4)]
    metrics = RewardThreshold(1.0).assign(samples, {"A": 1.0, "B": 0.4, "C": 1.0})
    assert [s.weight for s in samples] == [1.0, 0.0] and metrics["training/rollouts_kept"] == 2
    assert moves_policy(samples, "weight") and not moves_policy(samples[1:], "weight")
    assert "no rollout reached min_reward=1.0 (the best reward was 0.4)" in RewardThreshold(1.0).nothing_to_learn(
        samples[1:]
    )
