"""The training engine's data, shaped like Tinker's (`tinker.types`) so code written for one reads the other.

A `Datum` is one sequence to train on, already shifted by one: `model_input` holds tokens 0..n-2, and
`loss_fn_inputs["target_tokens"]` tokens 1..n-1, so position i predicts target i. The other per-position inputs:
`weights` (cross_entropy), `logprobs` (the sampler's logprob of each target, for importance_sampling and ppo) and
`advantages` (0 where a token is not the policy's action: the prompt, an agent's inserted observation). Losses are
summed over positions and datums, never averaged: a caller wanting a mean scales its weights or advantages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

LossFn = Literal["cross_entropy", "importance_sampling", "ppo"]
LOSS_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
}


@dataclass(frozen=True, slots=True)
class Datum:
    model_input: list[int]
    loss_fn_inputs: dict[str, list[float] | list[int]]

    def __post_init__(self) -> None:
        for key, values in self.loss_fn_inputs.items():
            if len(values) != len(self.model_input):
                raise ValueError(
                    f"loss_fn_inputs[{key!r}] has {len(values)} positions, model_input {len(self.model_input)}"
                )

    @classmethod
    def from_sequence(cls, tokens: Sequence[int], per_token: Mapping[str, Sequence[float]] | None = None) -> Datum:
        """A datum from a whole sequence (prompt + response) and inputs given per token of it (the first token's
        value is never used: nothing predicts it). Shifts by one as Tinker expects."""
        if len(tokens) < 2:
            raise ValueError("a datum needs at least two tokens (one input, one target)")
        inputs: dict[str, list[Any]] = {"target_tokens": list(tokens[1:])}
        for key, values in (per_token or {}).items():
            if len(values) != len(tokens):
                raise ValueError(f"{key} has {len(values)} values for {len(tokens)} tokens")
            inputs[key] = [float(value) for value in values[1:]]
        return cls(list(tokens[:-1]), inputs)


@dataclass(frozen=True, slots=True)
class AdamParams:
    """One optimizer step's settings (Tinker's defaults: decoupled weight decay 0, no gradient clipping)."""

    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0  # 0: no clipping


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class SampledSequence:
    tokens: list[int]
    logprobs: list[float]
    stop_reason: str  # "stop" (end token) or "length"


@dataclass(slots=True)
class ForwardBackwardOutput:
    loss_fn_outputs: list[dict[str, list[float]]]  # per datum: "logprobs" of its targets under the trained weights
    metrics: dict[str, float] = field(default_factory=dict)  # "loss:sum", "tokens:sum"


@dataclass(slots=True)
class OptimStepOutput:
    metrics: dict[str, float] = field(default_factory=dict)  # "grad_norm" (before clipping), "learning_rate"
