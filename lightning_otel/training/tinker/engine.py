"""The training-engine interface, shaped like Tinker's `TrainingClient` and `SamplingClient`, and the OpenAI-compatible
replica that serves an engine's latest sampler to agents.

    engine = LocalEngine("path/to/model", rank=32)                 # or RemoteEngine("Qwen/Qwen3-4B-Instruct-2507")
    out = engine.forward_backward(datums, "importance_sampling")    # gradients accumulate ...
    engine.optim_step(AdamParams(learning_rate=1e-4))               # ... until the step
    sampler = engine.save_weights_and_get_sampler("step-1")         # a versioned snapshot of the new weights
    sampler.sample(prompt_ids, 4, SamplingParams(max_tokens=32))    # -> [SampledSequence(tokens, logprobs, ...)]
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from lightning_otel.serving.sampler_api import ChatTokenizerLike, Generation, SamplerReplica, UnknownModel
from lightning_otel.training.tinker.types import (
    LOSS_INPUTS,
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    OptimStepOutput,
    SampledSequence,
    SamplingParams,
)


class Sampler(Protocol):
    """A snapshot of the weights that samples. One may also offer Tinker's `async sample_async(...)` (same arguments):
    the replica then awaits it, so concurrent requests reach the sampler together and can be batched."""

    version: int  # which weights: 0 the initial ones, then one more per save

    def sample(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> list[SampledSequence]: ...


class TrainingEngine(Protocol):
    chat_tokenizer: ChatTokenizerLike  # renders conversations to the prompt the sampler continues
    base_model: str

    def forward_backward(
        self, data: Sequence[Datum], loss_fn: str, loss_fn_config: Mapping[str, float] | None = None
    ) -> ForwardBackwardOutput: ...

    def optim_step(self, params: AdamParams) -> OptimStepOutput: ...

    def save_weights_and_get_sampler(self, name: str) -> Sampler: ...

    def save_state(self, name: str) -> str: ...

    def load_state(self, path: str) -> None: ...

    # A policy per agent (optional): the engine of another policy over the same base (LocalEngine: a LoRA adapter on
    # the same base weights; RemoteEngine: another Tinker training client).
    # def policy_engine(self, name: str) -> TrainingEngine: ...


class EngineSamplerReplica(SamplerReplica):
    """vLLM's API over an engine's current sampler; `use(sampler, version)` swaps it between requests, served as
    `version` (a trainer's count; None: the sampler's own), and every answer names the version that sampled it.
    Every open request is handed to the sampler at once (its `sample_async`, else `sample` in one of
    `max_in_flight` threads): a step's rollouts sample together, as one `sample(prompt, n)` would.

    A policy per agent: `use(sampler, version, policy="planner")` serves a policy's sampler under the policy's name,
    as vLLM serves a LoRA adapter (`model: "planner"` in the request); `model_name` keeps serving the base sampler
    (calls no policy claims), and an unknown name is vLLM's 404. Answers name the policy (`agl_policy`)."""

    def __init__(self, sampler: Sampler, tokenizer: ChatTokenizerLike, *, model_name: str = "agl-policy",
                 max_in_flight: int = 256, tool_call_parser: str | None = "hermes") -> None:  # fmt: skip
        super().__init__(tokenizer, model_name=model_name, tool_call_parser=tool_call_parser)
        # not asyncio's default executor: its min(32, cores + 4) threads would cap a step's requests at 6 on 2 cores
        self._threads = ThreadPoolExecutor(max_in_flight, thread_name_prefix="agl-sampler")
        self._policies: dict[str, tuple[Sampler, int]] = {}  # served name -> (sampler, version), swapped whole
        self.use(sampler)

    def use(self, sampler: Sampler, version: int | None = None, policy: str | None = None) -> None:
        # one reference swap (the sampler with its version): a request in flight finishes on the one it started with
        served = (sampler, sampler.version if version is None else version)
        if policy is None:
            self._serving = served
            self.weight_version = served[1]
        else:
            self._policies = {**self._policies, policy: served}

    @property
    def sampler(self) -> Sampler:
        return self._serving[0]

    def policy_sampler(self, policy: str) -> Sampler:
        return self._policies[policy][0]

    def served_models(self) -> list[str]:
        return [self.model_name, *self._policies]

    def route(self, model: Any) -> str:
        if isinstance(model, str) and model in self._policies:
            return model
        if not self._policies or model in (None, "", self.model_name):
            return self.model_name
        raise UnknownModel(model)

    def generate(self, prompt_ids: Sequence[int], *, max_tokens: int = 64, temperature: float = 1.0,
                 top_p: float = 1.0) -> Generation:  # fmt: skip
        return self._sample(*self._serving, prompt_ids, max_tokens, temperature, top_p)

    async def agenerate(self, prompt_ids: Sequence[int], *, max_tokens: int = 64, temperature: float = 1.0,
                        top_p: float = 1.0) -> Generation:  # fmt: skip
        return await self.agenerate_as(self.model_name, prompt_ids, max_tokens=max_tokens, temperature=temperature,
                                       top_p=top_p)  # fmt: skip

    async def agenerate_as(self, model: str, prompt_ids: Sequence[int], *, max_tokens: int, temperature: float,
                           top_p: float) -> Generation:  # fmt: skip
        policy = model if model in self._policies else None
        sampler, version = self._policies[model] if policy is not None else self._serving
        sample_async = getattr(sampler, "sample_async", None)
        if sample_async is None:
            call = functools.partial(self._sample, sampler, version, prompt_ids, max_tokens, temperature, top_p)
            generation = await asyncio.get_running_loop().run_in_executor(self._threads, call)
        else:
            params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p)
            [sequence] = await sample_async(list(prompt_ids), 1, params)
            generation = _generation(sequence, version)
        generation.policy = policy
        return generation

    @staticmethod
    def _sample(sampler: Sampler, version: int, prompt_ids: Sequence[int], max_tokens: int, temperature: float,
                top_p: float) -> Generation:  # fmt: skip
        params = SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p)
        [sequence] = sampler.sample(list(prompt_ids), 1, params)
        return _generation(sequence, version)


def _generation(sequence: SampledSequence, version: int) -> Generation:
    return Generation(list(sequence.tokens), list(sequence.logprobs), sequence.stop_reason, version)


def checked_datums(data: Sequence[Any], loss_fn: str) -> list[Datum]:
    """The data as our datums (a `tinker.types.Datum` converted), each carrying what the loss reads: a clear error
    before any compute (or any request)."""
    if loss_fn not in LOSS_INPUTS:
        raise ValueError(f"unknown loss_fn {loss_fn!r}: expected one of {', '.join(LOSS_INPUTS)}")
    datums = [as_datum(datum) for datum in data]
    for index, datum in enumerate(datums):
        missing = [key for key in LOSS_INPUTS[loss_fn] if key not in datum.loss_fn_inputs]
        if missing:
            raise ValueError(f"datum {index} lacks {missing} for loss_fn={loss_fn!r}")
    return datums


def as_datum(datum: Any) -> Datum:
    """Ours as is; a `tinker.types.Datum` (cookbook code) converted."""
    if isinstance(datum, Datum):
        return datum
    inputs = {key: list(value.data if hasattr(value, "data") else value) for key, value in datum.loss_fn_inputs.items()}
    return Datum(list(datum.model_input.to_ints()), inputs)
