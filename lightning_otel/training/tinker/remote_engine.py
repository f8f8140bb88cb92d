"""The remote engine: the official `tinker` SDK against the hosted Tinker service (or any server speaking its API),
behind the same interface as the local engine, so `Tinker(...)` trains either way.

    engine = RemoteEngine("Qwen/Qwen3-4B-Instruct-2507", rank=32)     # TINKER_API_KEY (and TINKER_BASE_URL) set

Nothing connects until the engine is built. Our datums become `tinker.types.Datum`s (`to_tinker_datum`: the same
shifted tokens, each loss input an array of the wire dtype Tinker expects); losses, optimizer and sampler snapshots
are the service's. Sampling stops at the tokenizer's end-of-turn token, as the local engine's does.
Needs the `[tinker]` extra (the SDK; transformers for the tokenizer, which comes from the hub unless `tokenizer`
names a local folder).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_otel.serving.sampler_api import HFChatTokenizer
from lightning_otel.training.tinker.engine import checked_datums
from lightning_otel.training.tinker.types import (
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    OptimStepOutput,
    SampledSequence,
    SamplingParams,
)


def _resolved(value: Any) -> Any:
    """The SDK returns futures (`.result()`); some calls return the object itself."""
    return value.result() if hasattr(value, "result") else value


def to_tinker_datum(datum: Datum) -> Any:
    """Our datum as the SDK's: `ModelInput.from_ints(inputs)` and each loss input as its wire dtype (target tokens
    int64, the rest float32), which the SDK converts from the lists."""
    from tinker import types

    return types.Datum(
        model_input=types.ModelInput.from_ints(list(datum.model_input)),
        loss_fn_inputs={key: list(values) for key, values in datum.loss_fn_inputs.items()},
    )


def to_tinker_adam(params: AdamParams) -> Any:
    from tinker import types

    return types.AdamParams(
        learning_rate=params.learning_rate, beta1=params.beta1, beta2=params.beta2, eps=params.eps,
        weight_decay=params.weight_decay, grad_clip_norm=params.grad_clip_norm,
    )  # fmt: skip


def to_tinker_sampling(params: SamplingParams, stop_token: int | None) -> Any:
    from tinker import types

    return types.SamplingParams(
        max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p, seed=params.seed,
        stop=[stop_token] if stop_token is not None else None,
    )  # fmt: skip


class RemoteSampler:
    """A Tinker `SamplingClient` (a snapshot of the weights) seen as our `Sampler`."""

    def __init__(self, client: Any, version: int, stop_token: int | None) -> None:
        self.client, self.version, self.stop_token = client, version, stop_token

    def sample(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> list[SampledSequence]:
        from tinker import types

        response = _resolved(
            self.client.sample(
                prompt=types.ModelInput.from_ints(list(prompt)),
                num_samples=num_samples,
                sampling_params=to_tinker_sampling(params, self.stop_token),
            )
        )
        return [
            SampledSequence(list(sequence.tokens), list(sequence.logprobs or []), str(sequence.stop_reason))
            for sequence in response.sequences
        ]

    def compute_logprobs(self, tokens: Sequence[int], temperature: float = 1.0) -> list[float | None]:
        """Each token's logprob given those before it (the first: None). Tinker scores at temperature 1 only."""
        return self.compute_logprobs_many([tokens], temperature)[0]

    def compute_logprobs_many(
        self, sequences: Sequence[Sequence[int]], temperature: float = 1.0
    ) -> list[list[float | None]]:
        """`compute_logprobs` of many sequences: every request sent before the first answer is awaited."""
        from tinker import types

        if temperature not in (0.0, 1.0):
            raise ValueError(f"Tinker's compute_logprobs scores at temperature 1, not {temperature}: distill at a "
                             "training temperature of 1")  # fmt: skip
        pending = [self.client.compute_logprobs(types.ModelInput.from_ints(list(tokens))) for tokens in sequences]
        return [list(_resolved(answer)) for answer in pending]


class RemoteEngine:
    """See the module docstring. `service_client`: an SDK `ServiceClient` built by the caller (else one from
    `base_url`/`api_key` or TINKER_BASE_URL/TINKER_API_KEY)."""

    def __init__(
        self,
        base_model: str,
        *,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        api_key: str | None = None,
        base_url: str | None = None,
        tokenizer: str | Path | None = None,
        service_client: Any = None,
    ) -> None:
        from transformers import AutoTokenizer

        if service_client is None:
            import tinker

            service_client = tinker.ServiceClient(base_url=base_url, api_key=api_key)
        self.base_model = base_model
        self.service = service_client
        self._lora_args = {"base_model": base_model, "rank": rank, "seed": seed, "train_mlp": train_mlp,
                           "train_attn": train_attn, "train_unembed": train_unembed}  # fmt: skip
        self.training = _resolved(service_client.create_lora_training_client(**self._lora_args))
        self.chat_tokenizer = HFChatTokenizer(AutoTokenizer.from_pretrained(str(tokenizer or base_model)))
        self.version = -1
        self._policies: dict[str, RemoteEngine] = {}

    def policy_engine(self, name: str) -> RemoteEngine:
        """The engine of policy `name` (a policy per agent): another LoRA training client on the same base model,
        with the same settings (Tinker serves many adapters over one base). Asked twice, the same engine."""
        if name not in self._policies:
            engine = copy.copy(self)
            engine.training = _resolved(self.service.create_lora_training_client(**self._lora_args))
            engine.version = -1
            self._policies[name] = engine
        return self._policies[name]

    def forward_backward(
        self, data: Sequence[Any], loss_fn: str, loss_fn_config: Mapping[str, float] | None = None
    ) -> ForwardBackwardOutput:
        datums = checked_datums(data, loss_fn)  # before the request: a clear error, no billed call
        output = _resolved(
            self.training.forward_backward([to_tinker_datum(d) for d in datums], loss_fn, dict(loss_fn_config or {}))
        )
        outputs = [{key: list(value.data) for key, value in item.items()} for item in output.loss_fn_outputs]
        return ForwardBackwardOutput(outputs, dict(output.metrics or {}))

    def optim_step(self, params: AdamParams) -> OptimStepOutput:
        response = _resolved(self.training.optim_step(to_tinker_adam(params)))
        return OptimStepOutput(dict(response.metrics or {}))

    def save_weights_and_get_sampler(self, name: str) -> RemoteSampler:
        client = _resolved(self.training.save_weights_and_get_sampling_client())
        self.version += 1
        return RemoteSampler(client, self.version, self.chat_tokenizer.eos_token_id)

    def save_state(self, name: str) -> str:
        return str(_resolved(self.training.save_state(name)).path)

    def load_state(self, path: str) -> None:
        _resolved(self.training.load_state(path))
