"""Samples read from traces -> the engine's datums.

Each sample (one selected LLM call: the prompt's token ids, the response's token ids as the server sampled them,
their logprobs, a mask that is 0 on tokens an agent inserted between calls) becomes one datum: prompt + response,
shifted by one; on the response's sampled tokens the sampler's logprob and the sample's advantage (or weight 1 for
cross_entropy); 0 everywhere else, so the prompt and observation tokens weigh nothing. Token ids are used as
captured: nothing is re-tokenized.

Advantages come from the loop's estimator (Tinker's: tinker-cookbook's, a rollout's reward minus its group's mean
reward; with `AnchorAdvantage`, per call). Groups none of whose samples has a non-zero advantage (with GRPO: every
reward equal) teach nothing and are dropped unless `keep_constant_groups`; a per-token signal (on-policy
distillation's `Sample.token_advantages`) is added to the advantage, and a group with one moves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lightning_otel.adapters.triplets import Triplet
from lightning_otel.training.loop.advantages import GroupAdvantage
from lightning_otel.training.loop.samples import Sample
from lightning_otel.training.tinker.types import Datum

# tinker-cookbook's advantage: reward - the group's mean over its rollouts; a lone rollout has no baseline (0).
COOKBOOK_ADVANTAGE = {"per": "rollout", "normalize_by_std": False, "lone": "zero"}


@dataclass(slots=True)
class DatumBatch:
    datums: list[Datum] = field(default_factory=list)
    groups: int = 0
    constant_groups: int = 0  # every reward equal: no signal (dropped unless kept)
    samples_without_logprobs: int = 0  # left out of importance_sampling/ppo (no sampler logprobs)
    samples_without_reward: int = 0
    trained_tokens: int = 0
    staleness: list[int] = field(default_factory=list)  # per datum: its sample's policy versions behind


def triplet_datum(
    triplet: Triplet, *, advantage: float, loss_fn: str, token_advantages: Sequence[float] | None = None
) -> Datum:
    """One sample as a datum (see the module docstring). cross_entropy: weight 1 on sampled response tokens.
    `token_advantages`: a per-token signal added to the advantage (on-policy distillation's)."""
    prompt, response = list(triplet.prompt_token_ids), list(triplet.response_token_ids)
    mask = list(triplet.response_mask) if triplet.response_mask else [1] * len(response)
    zeros = [0.0] * len(prompt)
    if loss_fn == "cross_entropy":
        return Datum.from_sequence(prompt + response, {"weights": zeros + [float(m) for m in mask]})
    logprobs = triplet.response_logprobs or []
    if len(logprobs) != len(response):
        raise ValueError(f"sample of rollout {triplet.rollout_id}: {len(logprobs)} logprobs, {len(response)} tokens")
    extras = token_advantages or [0.0] * len(mask)
    return Datum.from_sequence(
        prompt + response,
        {
            "logprobs": zeros + [lp if m else 0.0 for lp, m in zip(logprobs, mask, strict=True)],
            "advantages": zeros + [(advantage + extra) * m for m, extra in zip(mask, extras, strict=True)],
        },
    )


def sample_datums(
    samples: Sequence[Sample], *, loss_fn: str = "importance_sampling", keep_constant_groups: bool = False
) -> DatumBatch:
    """Datums of samples whose advantages (or weights) the estimator set."""
    batch = DatumBatch()
    moving: dict[str, bool] = {}  # group -> some sample of it has a non-zero advantage
    for sample in samples:
        moving[sample.group] = (
            moving.get(sample.group, False) or bool(sample.advantage) or any(sample.token_advantages or ())
        )
    batch.groups = len(moving)
    constant = {group for group, moves in moving.items() if not moves and loss_fn != "cross_entropy"}
    batch.constant_groups = len(constant)
    for sample in samples:
        triplet = sample.triplet
        if (sample.group in constant and not keep_constant_groups) or len(triplet.response_token_ids) == 0:
            continue
        if loss_fn == "cross_entropy" and sample.weight == 0:
            continue
        if loss_fn != "cross_entropy" and not triplet.response_logprobs:
            batch.samples_without_logprobs += 1
            continue
        batch.datums.append(triplet_datum(triplet, advantage=sample.advantage or 0.0, loss_fn=loss_fn,
                                          token_advantages=sample.token_advantages))  # fmt: skip
        batch.staleness.append(sample.staleness)
        batch.trained_tokens += sum(triplet.response_mask or [1] * len(triplet.response_token_ids))
    return batch


def group_datums(
    groups: Mapping[object, Sequence[Triplet]],
    rewards: Mapping[str, float | None],
    *,
    loss_fn: str = "importance_sampling",
    keep_constant_groups: bool = False,
) -> DatumBatch:
    """Datums of every group (`BatchResult.groups()`): advantage = the rollout's reward - the group's mean over its
    rollouts (each rollout counted once, whatever its number of samples). `rewards`: final reward per rollout."""
    samples, without_reward = [], 0
    for key, triplets in groups.items():
        for triplet in triplets:
            reward = rewards.get(triplet.rollout_id or "")
            if reward is None:
                without_reward += 1
            else:
                samples.append(Sample(triplet, float(reward), str(key)))
    GroupAdvantage(**COOKBOOK_ADVANTAGE).assign(samples)  # type: ignore[arg-type]
    batch = sample_datums(samples, loss_fn=loss_fn, keep_constant_groups=keep_constant_groups)
    batch.groups, batch.samples_without_reward = len(groups), without_reward
    return batch
