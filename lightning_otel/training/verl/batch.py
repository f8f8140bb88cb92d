"""Training samples -> verl's batch (`DataProto`) for GRPO and the other advantage estimators.

    samples = [Sample(triplet, reward=adapted.final_reward, group=group_id) for ...]   # the loop's samples
    batch, stats = build_batch(samples, BatchShape(max_prompt_length=1024, max_response_length=512, pad_token_id=0),
                               row_multiple=world_size * mini_batch)

Rows: prompts left-padded and responses right-padded to the batch's longest (`max_prompt_length` and
`max_response_length` are caps: a longer prompt is dropped, a longer response cut); `response_mask`
is 1 only on tokens the policy sampled (the triplet's mask: tool results and other inserted tokens are 0); the
reward sits on the last response token; `rollout_log_probs` are the sampler's logprobs; `uid` groups rows for GRPO.
When every sample carries its advantage (the loop's estimator), `advantages` (and `returns`) hold it on the sampled
tokens; otherwise verl's own estimator computes them from the rewards.
A prompt longer than the limit cannot be trained without changing what the policy saw: the row is dropped and
counted. A longer response is cut to the limit (the tokens kept are exactly the sampled ones) and counted. The row
count is padded to `row_multiple` with copies that train nothing (response_mask 0, their own group), instead of
dropping samples at random. Needs `verl` (and torch) installed: the `[verl]` extra.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from verl import DataProto
from verl.utils.model import compute_position_id_with_mask

from lightning_otel.training.loop.samples import Sample


@dataclass(frozen=True, slots=True)
class BatchShape:
    max_prompt_length: int
    max_response_length: int
    pad_token_id: int


@dataclass(slots=True)
class BatchStats:
    rows: int = 0  # trained rows (padding excluded)
    padding_rows: int = 0
    dropped_long_prompts: int = 0
    longest_dropped_prompt: int = 0  # tokens: what data.max_prompt_length must reach to keep them all
    truncated_responses: int = 0
    empty_responses: int = 0  # dropped: nothing sampled to train on
    groups: int = 0
    group_sizes: list[int] = field(default_factory=list)

    def as_metrics(self, prefix: str = "batch/") -> dict[str, float]:
        return {
            f"{prefix}rows": self.rows,
            f"{prefix}padding_rows": self.padding_rows,
            f"{prefix}dropped_long_prompts": self.dropped_long_prompts,
            f"{prefix}truncated_responses": self.truncated_responses,
            f"{prefix}empty_responses": self.empty_responses,
            f"{prefix}groups": self.groups,
        }


def _row(sample: Sample, shape: BatchShape, stats: BatchStats) -> dict[str, Any] | None:
    triplet = sample.triplet
    prompt = list(triplet.prompt_token_ids)
    if len(prompt) > shape.max_prompt_length:
        stats.dropped_long_prompts += 1
        stats.longest_dropped_prompt = max(stats.longest_dropped_prompt, len(prompt))
        return None
    response = list(triplet.response_token_ids)
    mask = list(triplet.response_mask) if triplet.response_mask else [1] * len(response)
    logprobs = list(triplet.response_logprobs) if triplet.response_logprobs else [0.0] * len(response)
    if len(response) > shape.max_response_length:
        stats.truncated_responses += 1
        response, mask, logprobs = (values[: shape.max_response_length] for values in (response, mask, logprobs))
    if not response or not any(mask):
        stats.empty_responses += 1
        return None
    return {"prompt": prompt, "response": response, "mask": mask, "logprobs": logprobs, "sample": sample}


class NoTrainableRows(ValueError):
    """Every sample was dropped (or there were none): `stats` says why."""

    def __init__(self, stats: BatchStats) -> None:
        super().__init__(f"no trainable rows in this batch: {stats.as_metrics()}")
        self.stats = stats


def build_batch(
    samples: Sequence[Sample], shape: BatchShape, *, row_multiple: int | Callable[[int], int] = 1
) -> tuple[DataProto, BatchStats]:
    """The `DataProto` verl's trainer consumes, and what was dropped, cut or padded on the way. `row_multiple` may
    depend on the trainable row count (a function of it), e.g. data-parallel size x mini-batches."""
    stats = BatchStats()
    rows = [row for sample in samples if (row := _row(sample, shape, stats)) is not None]
    if not rows:
        raise NoTrainableRows(stats)
    if callable(row_multiple):
        row_multiple = row_multiple(len(rows))
    stats.rows = len(rows)
    sizes: dict[str, int] = {}
    for row in rows:
        sizes[row["sample"].uid] = sizes.get(row["sample"].uid, 0) + 1
    stats.groups, stats.group_sizes = len(sizes), sorted(sizes.values())
    while len(rows) % max(row_multiple, 1):
        rows.append({**rows[-1], "mask": [0] * len(rows[-1]["mask"]), "padding": len(rows)})
        stats.padding_rows += 1

    # as wide as the batch's longest (the config's lengths are caps): a step of short calls computes no padding
    count = len(rows)
    prompt_len, response_len = max(len(row["prompt"]) for row in rows), max(len(row["response"]) for row in rows)
    prompts = torch.full((count, prompt_len), shape.pad_token_id, dtype=torch.long)
    responses = torch.full((count, response_len), shape.pad_token_id, dtype=torch.long)
    prompt_attention = torch.zeros((count, prompt_len), dtype=torch.long)
    response_attention = torch.zeros((count, response_len), dtype=torch.long)
    response_mask = torch.zeros((count, response_len), dtype=torch.long)
    scores = torch.zeros((count, response_len), dtype=torch.float32)
    rollout_log_probs = torch.zeros((count, response_len), dtype=torch.float32)
    estimated = all(row["sample"].advantage is not None for row in rows)
    advantages = torch.zeros((count, response_len), dtype=torch.float32)
    uids, agents, rollout_ids = [], [], []
    for index, row in enumerate(rows):
        prompt, response = row["prompt"], row["response"]
        prompts[index, prompt_len - len(prompt) :] = torch.tensor(prompt)  # left-padded
        prompt_attention[index, prompt_len - len(prompt) :] = 1
        responses[index, : len(response)] = torch.tensor(response)  # right-padded
        response_attention[index, : len(response)] = 1
        response_mask[index, : len(response)] = torch.tensor(row["mask"])
        rollout_log_probs[index, : len(response)] = torch.tensor(row["logprobs"], dtype=torch.float32)
        sample: Sample = row["sample"]
        padding = "padding" in row
        scores[index, len(response) - 1] = 0.0 if padding else float(sample.reward)  # reward on the last token
        if estimated and not padding:
            advantages[index] = float(sample.advantage) * response_mask[index]  # type: ignore[arg-type]
        uids.append(f"padding-{row['padding']}" if padding else sample.uid)  # a group of its own, masked out
        agents.append(sample.triplet.agent_name or "")
        rollout_ids.append(sample.triplet.rollout_id or "")
    attention_mask = torch.cat([prompt_attention, response_attention], dim=1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "response_mask": response_mask,
        "token_level_scores": scores,
        "rollout_log_probs": rollout_log_probs,
        **({"advantages": advantages, "returns": advantages.clone()} if estimated else {}),
    }
    non_tensors = {
        "uid": np.array(uids, dtype=object),
        "agent_name": np.array(agents, dtype=object),
        "rollout_id": np.array(rollout_ids, dtype=object),
        "multi_modal_inputs": np.array([{} for _ in rows], dtype=object),  # read unconditionally by verl
    }
    meta = {"global_token_num": attention_mask.sum(dim=-1).tolist(), **stats.as_metrics()}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta), stats
