"""What the two-choice benchmark tasks share (credit_assignment, policy_per_agent, async_training): how a one-token
reply becomes a choice, the OpenAI client each runner process keeps, and the model an arm trains."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import lightning_otel as agl

MODELS = ("tiny", "smollm2")


def choice_of(reply: str) -> str:
    """left or right. The tiny policy cannot read, so a reply's first letter decides: a to m is left (about 40% of
    the untrained policy's replies), anything else right; SmolLM2 is read the same way, so both face one task."""
    first = reply.strip()[:1].lower()
    return "left" if "a" <= first <= "m" else "right"


@functools.cache
def chat_client(base_url: str, api_key: str) -> Any:
    """One OpenAI client per runner process and endpoint (a client per call costs its connection pool)."""
    from openai import OpenAI

    return OpenAI(base_url=base_url, api_key=api_key, max_retries=5)


def base_model(kind: str, seed: int, workdir: Path) -> Path:
    """The model an arm trains: SmolLM2-135M-Instruct (built once, cached), or the tiny Qwen2 built offline with
    the run's seed (in `workdir`, shared by the arms of that seed)."""
    if kind == "smollm2":
        return agl.smollm2()
    from lightning_otel.testing import save_tiny_model

    model = workdir / f"model-{seed}"
    if not (model / "config.json").exists():
        save_tiny_model(model, seed=seed)
    return model
