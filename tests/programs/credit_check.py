"""Per-call credit end to end, shared by the framework lanes: a batch of real rollouts (a framework's agents, the
test server's token ids, spans through a real collector) -> the loop's samples -> `AnchorAdvantage` -> Tinker datums
(and, where verl is installed, verl's batch), checked call by call."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from lightning_otel.runtime.rollout_batch import BatchResult
from lightning_otel.training.loop.credit import AnchorAdvantage
from lightning_otel.training.loop.samples import Sample, samples_from
from lightning_otel.training.tinker.datums import sample_datums


def credited_samples(batch: BatchResult) -> tuple[list[Sample], dict[str, float]]:
    """The loop's samples of the batch with the anchor estimator's advantages (mean-only baselines, discount 0.9)."""
    samples, _ = samples_from(batch)
    metrics = AnchorAdvantage(gamma=0.9, normalize_by_std=False).assign(samples)
    return samples, metrics


def assert_calls_of_a_rollout_differ(samples: list[Sample]) -> None:
    """Per-call, not per-rollout: some rollout's calls carry different advantages, and some anchor state has more
    than one member."""
    by_rollout = {key: [s.advantage for s in group] for key, group in itertools.groupby(samples, lambda s: s.rollout)}
    assert any(len(set(values)) > 1 for values in by_rollout.values()), by_rollout
    assert any(sample.credit.anchor_size > 1 and sample.credit.step_advantage != 0 for sample in samples)


def assert_datums_carry_each_calls_advantage(samples: list[Sample]) -> None:
    built = sample_datums(samples, keep_constant_groups=True)
    kept = [sample for sample in samples if sample.triplet.response_token_ids]
    assert len(built.datums) == len(kept) > 0
    for datum, sample in zip(built.datums, kept, strict=True):
        triplet = sample.triplet
        response = len(triplet.response_token_ids)
        advantages = datum.loss_fn_inputs["advantages"][-response:]  # shifted by one: the response's targets
        expected = [sample.advantage * mask for mask in triplet.response_mask]
        assert advantages == pytest.approx(expected), (sample.rollout, triplet.agent_name)
        assert datum.loss_fn_inputs["advantages"][:-response] == [0.0] * (len(datum.model_input) - response)


def assert_verl_rows_carry_each_calls_advantage(samples: list[Sample], verl_batch: Any) -> None:
    """Rows in sample order (no row dropped: the shape fits); advantages on sampled tokens only."""
    advantages, mask = verl_batch.batch["advantages"], verl_batch.batch["response_mask"]
    for row, sample in enumerate(samples):
        length = len(sample.triplet.response_token_ids)
        assert advantages[row, :length].tolist() == pytest.approx(
            [sample.advantage * m for m in sample.triplet.response_mask], abs=1e-6
        )
        assert advantages[row][mask[row] == 0].abs().sum().item() == 0
