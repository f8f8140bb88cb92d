"""A tiny random policy, built offline: a small Qwen2 causal LM sized to the offline tokenizer, and both saved as a
Hugging Face model directory (what verl loads as `actor_rollout_ref.model.path` when no model can be downloaded:
tests, the CPU demo, `lightning-otel train --tiny-model`). Needs torch and transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lightning_otel.testing.tokenizer import build_tokenizer


def tiny_policy(tokenizer: Any, *, seed: int = 0, hidden_size: int = 64, layers: int = 2) -> torch.nn.Module:
    """A small random Qwen2 causal LM sized to the tokenizer, built offline from a config (no model hub)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config).eval()


def save_tiny_model(directory: str | Path, *, seed: int = 0, hidden_size: int = 64, layers: int = 2) -> Path:
    """A tiny random Qwen2 and its tokenizer (the offline BPE with a ChatML template) as an HF model directory: what
    verl loads as `actor_rollout_ref.model.path` when no model can be downloaded (tests, the CPU demo)."""
    path = Path(directory)
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(path)
    tiny_policy(tokenizer, seed=seed, hidden_size=hidden_size, layers=layers).save_pretrained(path)
    return path
