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
    scored: list[list[float | None]] = [[] for _ in sequences]
    scale = temperature if temperature > 0 else 1.0
    with torch.no_grad():
        for indices, shared in shared_prefix_batches(sequences, size, min_shared):
            rows = [list(sequences[index]) for index in indices]
            width = max(len(row) for row in rows)
            ids = torch.tensor([row + [0] * (width - len(row)) for row in rows], device=device)
            mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows], device=device)
            if shared:
                logp = _shared_prefix_logprobs(model, ids, mask, scale, shared)
            else:
                logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float() / scale
                logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
            for row, index in enumerate(indices):
                scored[index] = [None, *logp[row, : len(rows[row]) - 1].tolist()]
    return scored


def _shared_prefix_logprobs(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, scale: float, shared: int
) -> torch.Tensor:
    """[rows, width - 1] logprobs of each next token, the rows' first `shared` tokens read once: their keys and values
    repeated for each row's own tokens."""
    import torch

    rows = ids.shape[0]
    prefix = model(input_ids=ids[:1, :shared], use_cache=True)
    cache = prefix.past_key_values
    cache.batch_repeat_interleave(rows)
    positions = torch.arange(shared, ids.shape[1], device=ids.device).expand(rows, -1)
    suffix = model(input_ids=ids[:, shared:], attention_mask=mask, position_ids=positions, past_key_values=cache)
    head = torch.log_softmax(prefix.logits[0].float() / scale, dim=-1)  # [shared, V], once
    inside = head[:-1].gather(-1, ids[0, 1:shared, None])[:, 0]  # the prefix's own next tokens
    first = head[-1][ids[:, shared]]  # the prefix's last position predicts each row's first own token
    tail = torch.log_softmax(suffix.logits[:, :-1].float() / scale, dim=-1).gather(-1, ids[:, shared + 1 :, None])
    return torch.cat([inside.expand(rows, -1), first[:, None], tail[..., 0]], dim=1)


__all__ = ["score_sequences", "shared_prefix_batches"]
