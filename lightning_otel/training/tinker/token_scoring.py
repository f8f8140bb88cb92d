"""Sequences batched by their shared beginning, for the local engine's update and for scoring token ids.

A group's rollouts share a task's prompt (an agent's instructions, a tool's schema, a teacher's context): most of
what a CPU computes for a step of short replies. `shared_prefix_batches` puts sequences with the same beginning in
one micro-batch and says how long that beginning is, so it is read once; `score_sequences` is Tinker's
`compute_logprobs` for many sequences at once on those batches, without gradients (on-policy distillation's teacher).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def shared_prefix_batches(inputs: Sequence[Sequence[int]], size: int, min_shared: int) -> list[tuple[list[int], int]]:
    """Micro-batches of at most `size` sequences (indices into `inputs`), those with the same beginning together
    (sorted by their tokens), each with the length of the prefix all of its rows share (0 when it is under
    `min_shared` tokens or the batch is one row; at least one token of each row is its own)."""
    order = sorted(range(len(inputs)), key=lambda index: list(inputs[index]))
    batches = []
    for start in range(0, len(order), size):
        indices = order[start : start + size]
        rows = [inputs[index] for index in indices]
        shared = min(len(tokens) for tokens in rows) - 1
        for tokens in rows[1:]:
            shared = next((at for at in range(shared) if tokens[at] != rows[0][at]), shared)
        batches.append((indices, shared if len(indices) > 1 and shared >= min_shared else 0))
    return batches


def score_sequences(
    model: torch.nn.Module,
    sequences: Sequence[Sequence[int]],
    temperature: float = 1.0,
    *,
    size: int = 8,
    min_shared: int = 16,
) -> list[list[float | None]]:
    """Each sequence's tokens' logprobs given those before them (the first: None), at `temperature` (0 is scored at
    1: greedy has no distribution), in micro-batches of `size` whose shared prefix is read once."""
    import torch

    device = next(model.parameters()).device
    scored: list[list[float | None]] = [[None] * len(tokens) for tokens in sequences]
    scale = temperature if temperature > 0 else 1.0
    inputs = [list(tokens[:-1]) for tokens in sequences]  # each token is read to predict the next
    with torch.no_grad():
        for indices, shared in shared_prefix_batches(inputs, size, min_shared):
            rows = [index for index in indices if inputs[index]]  # a one-token sequence has nothing to score
            if not rows:
                continue
            width = max(len(inputs[index]) for index in rows)

            def padded(lists: list[list[int]], width: int = width) -> torch.Tensor:
                return torch.tensor([row + [0] * (width - len(row)) for row in lists], device=device)

            input_ids = padded([inputs[index] for index in rows])
            mask = padded([[1] * len(inputs[index]) for index in rows])
            targets = padded([list(sequences[index][1:]) for index in rows])
            if shared and len(rows) == len(indices):
                logp = shared_prefix_logprobs(model, input_ids, mask, targets, scale, shared)
            else:
                logits = model(input_ids=input_ids, attention_mask=mask).logits.float() / scale
                logp = torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None])[..., 0]
            for row, index in enumerate(rows):
                scored[index] = [None, *logp[row, : len(inputs[index])].tolist()]
    return scored


def shared_prefix_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    shared: int,
) -> torch.Tensor:
    """[rows, width] logprobs of each row's targets, as one forward over the whole rows would give them, with the
    rows' first `shared` input tokens read once: their keys and values repeated for each row's own tokens (gradients
    through them add up over the rows, as they would row by row)."""
    import torch

    rows = input_ids.shape[0]
    prefix = model(input_ids=input_ids[:1, :shared], use_cache=True)
    cache = prefix.past_key_values
    cache.batch_repeat_interleave(rows)
    positions = torch.arange(shared, input_ids.shape[1], device=input_ids.device).expand(rows, -1)
    suffix = model(input_ids=input_ids[:, shared:], attention_mask=mask, position_ids=positions,
                   past_key_values=cache).logits.float()  # fmt: skip
    head = torch.log_softmax(prefix.logits[0].float() / temperature, dim=-1)  # [shared, V], once
    inside = head[:-1].gather(-1, targets[0, : shared - 1, None]).squeeze(-1)  # the prefix's own targets
    first = head[-1][targets[:, shared - 1]]  # the prefix's last position predicts each row's first own token
    tail = torch.log_softmax(suffix / temperature, dim=-1).gather(-1, targets[:, shared:, None]).squeeze(-1)
    return torch.cat([inside.expand(rows, -1), first[:, None], tail], dim=1)


__all__ = ["score_sequences", "shared_prefix_batches", "shared_prefix_logprobs"]
