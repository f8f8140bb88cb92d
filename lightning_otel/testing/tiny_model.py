"""A tiny random policy, built offline: a small Qwen2 causal LM sized to the offline tokenizer, and both saved as a
Hugging Face model directory (what verl loads as `actor_rollout_ref.model.path` when no model can be downloaded:
tests, the CPU demo, `lightning-otel train --tiny-model`). Needs torch and transformers."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_otel.models.named import model_folder
from lightning_otel.testing.tokenizer import ChatTokenizer, build_tokenizer

if TYPE_CHECKING:  # torch is imported where a model is built: an agent module that names model_or_tiny (a
    import torch  # benchmark's) is imported by every runner process, which needs no torch (4-5 s of CPU each)


def tiny_policy(
    tokenizer: Any,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    layers: int = 2,
    architecture: str = "qwen2",
    context_length: int = 32768,
) -> torch.nn.Module:
    """A small random causal LM (Qwen2, or Llama) sized to the tokenizer, built offline from a config (no model hub).
    `context_length`: its `max_position_embeddings`, the context a replica serves it with: 32768 by default, as a
    small real model's (a random model's positions cost nothing; a harness's prompts run to thousands of tokens).

    `architecture="llama"` where the tokenizer's own pre-tokenizer must be kept: transformers 5 loads a `qwen2`
    model directory's tokenizer as `Qwen2Tokenizer`, which replaces the pre-tokenizer of tokenizer.json with Qwen2's."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if architecture not in ("qwen2", "llama"):
        raise ValueError(f"architecture must be 'qwen2' or 'llama', got {architecture!r}")
    config_class, model_class = (
        (Qwen2Config, Qwen2ForCausalLM) if architecture == "qwen2" else (LlamaConfig, LlamaForCausalLM)
    )
    torch.manual_seed(seed)
    config = config_class(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context_length,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    return model_class(config).eval()


def save_tiny_model(
    directory: str | Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    layers: int = 2,
    tokenizer: ChatTokenizer | None = None,
    architecture: str = "qwen2",
    context_length: int = 32768,
) -> Path:
    """A tiny random Qwen2 and its tokenizer (the offline BPE with a ChatML template, or `tokenizer`) as an HF model
    directory: what verl loads as `actor_rollout_ref.model.path` when no model can be downloaded (tests, the CPU
    demo, the spider example with a tokenizer trained on its own data)."""
    path = Path(directory)
    tokenizer = tokenizer or build_tokenizer()
    tokenizer.save_pretrained(path)
    model = tiny_policy(tokenizer, seed=seed, hidden_size=hidden_size, layers=layers, architecture=architecture,
                        context_length=context_length)  # fmt: skip
    model.save_pretrained(path)
    return path


def model_or_tiny(model: str | Path, workdir: str | Path, *, seed: int = 0) -> Path:
    """The folder a run trains: `model`'s (a name such as "smollm2", built once and cached, or a model folder), or
    for "tiny" a tiny random model built with `seed` in `workdir` once (a quick mode's or a test's model)."""
    if model != "tiny":
        return model_folder(model)
    folder = Path(workdir) / f"model-tiny-{seed}"
    if not (folder / "config.json").exists():
        save_tiny_model(folder, seed=seed)
    return folder
