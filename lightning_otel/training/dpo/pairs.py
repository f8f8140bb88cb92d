"""A step's samples -> DPO pairs, by the export's rule (`lightning_otel.export.shapes`): within each group (one task
at this step), a higher- and a lower-reward rollout, at the selected calls where both saw the same prompt tokens.
Online DPO and `lightning-otel export --shape pairs` form the same pairs from the same rollouts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightning_otel.export.rollouts import ExportedCall, ExportedRollout
from lightning_otel.export.shapes import PairCounts, PairRule, preference_pairs
from lightning_otel.training.loop.samples import Sample


def sample_pairs(samples: Sequence[Sample], rule: PairRule, counts: PairCounts) -> tuple[list[dict[str, Any]], int]:
    """The pairs of a step, and how many samples were left out because agent-inserted tokens sit in their response
    (a merged trajectory: DPO would train them as the policy's own)."""
    groups: dict[str, dict[str, list[Sample]]] = {}
    merged = 0
    for sample in samples:
        triplet = sample.triplet
        if triplet is None:
            continue
        if 0 in triplet.response_mask:
            merged += 1
            continue
        groups.setdefault(sample.group, {}).setdefault(sample.rollout_id, []).append(sample)
    pairs: list[dict[str, Any]] = []
    for group, rollouts in groups.items():
        exported = [_rollout(group, rollout_id, members) for rollout_id, members in rollouts.items()]
        pairs += preference_pairs(exported, rule, counts)
    return pairs, merged


def _rollout(group: str, rollout_id: str, samples: list[Sample]) -> ExportedRollout:
    calls = []
    for index, sample in enumerate(samples):
        triplet = sample.triplet
        assert triplet is not None
        calls.append(
            ExportedCall(
                index=index, span_id=triplet.span_ids[0] if triplet.span_ids else "", response_id=None,
                agent=triplet.agent_name, selected=True, prompt_token_ids=triplet.prompt_token_ids,
                response_token_ids=triplet.response_token_ids, response_logprobs=triplet.response_logprobs,
                input_messages=None, output_message=None, reward=triplet.reward,
                policy_version=triplet.policy_version,
            )
        )  # fmt: skip
    first = samples[0].triplet
    return ExportedRollout(
        rollout_id=rollout_id, attempt_id=first.attempt_id if first else None,
        task_id=first.task_id if first else None, group_id=group, run_id=None, step=None, mode="train",
        status="succeeded", reward=samples[0].reward, input=None, policy_version=None, calls=calls,
    )  # fmt: skip
