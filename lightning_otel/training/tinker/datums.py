"""Samples read from traces -> the engine's datums, with group-relative advantages.

Each `Triplet` (one sample: the prompt's token ids, the response's token ids as the server sampled them, their
logprobs, a mask that is 0 on tokens an agent inserted between calls) becomes one datum: prompt + response, shifted
by one; on the response's sampled tokens the sampler's logprob and the rollout's advantage (or weight 1 for
cross_entropy); 0 everywhere else, so the prompt and observation tokens weigh nothing. Token ids are used as
captured: nothing is re-tokenized.

Advantages are Tinker's cookbook's: a rollout's reward minus its group's mean reward (a group: the rollouts of one
task in one batch, optionally per agent); groups whose rewards are all equal teach nothing and are dropped unless
`keep_constant_groups`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lightning_otel.adapters.triplets import Triplet
from lightning_otel.training.tinker.types import Datum


@dataclass(slots=True)
class DatumBatch:
    datums: list[Datum] = field(default_factory=list)
    groups: int = 0
    constant_groups: int = 0  # every reward equal: no signal (dropped unless kept)
    samples_without_logprobs: int = 0  # left out of importance_sampling/ppo (no sampler logprobs)
    samples_without_reward: int = 0
    trained_tokens: int = 0


def triplet_datum(triplet: Triplet, *, advantage: float, loss_fn: str) -> Datum:
    """One sample as a datum (see the module docstring). cross_entropy: weight 1 on sampled response tokens."""
    prompt, response = list(triplet.prompt_token_ids), list(triplet.response_token_ids)
    mask = list(triplet.response_mask) if triplet.response_mask else [1] * len(response)
    zeros = [0.0] * len(prompt)
    if loss_fn == "cross_entropy":
        return Datum.from_sequence(prompt + response, {"weights": zeros + [float(m) for m in mask]})
    logprobs = triplet.response_logprobs or []
    if len(logprobs) != len(response):
        raise ValueError(f"sample of rollout {triplet.rollout_id}: {len(logprobs)} logprobs, {len(response)} tokens")
    return Datum.from_sequence(
        prompt + response,
        {
            "logprobs": zeros + [lp if m else 0.0 for lp, m in zip(logprobs, mask, strict=True)],
            "advantages": zeros + [advantage * m for m in mask],
        },
    )


def group_datums(
    groups: Mapping[object, Sequence[Triplet]],
    rewards: Mapping[str, float | None],
    *,
    loss_fn: str = "importance_sampling",
    keep_constant_groups: bool = False,
) -> DatumBatch:
    """Datums of every group (`BatchResult.groups()`): advantage = the rollout's reward - the group's mean over its
    rollouts (each rollout counted once, whatever its number of samples). `rewards`: final reward per rollout."""
    batch = DatumBatch()
    for triplets in groups.values():
        batch.groups += 1
        rollouts = sorted({t.rollout_id for t in triplets if t.rollout_id is not None})
        known = {rollout: rewards.get(rollout) for rollout in rollouts}
        batch.samples_without_reward += sum(1 for t in triplets if known.get(t.rollout_id) is None)
        scored = {rollout: float(reward) for rollout, reward in known.items() if reward is not None}
        if not scored:
            continue
        mean = statistics.fmean(scored.values())
        if len(set(scored.values())) == 1 and loss_fn != "cross_entropy":
            batch.constant_groups += 1
            if not keep_constant_groups:
                continue
        for triplet in triplets:
            if triplet.rollout_id not in scored or len(triplet.response_token_ids) == 0:
                continue
            if loss_fn != "cross_entropy" and not triplet.response_logprobs:
                batch.samples_without_logprobs += 1
                continue
            datum = triplet_datum(triplet, advantage=scored[triplet.rollout_id] - mean, loss_fn=loss_fn)
            batch.datums.append(datum)
            batch.trained_tokens += sum(triplet.response_mask or [1] * len(triplet.response_token_ids))
    return batch
