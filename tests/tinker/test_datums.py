"""Samples -> datums (shift, masks, group-relative advantages, constant groups) and our datums as the `tinker` SDK's
own types (what the remote engine sends), with the SDK's real classes; the remote engine's calls through a recording
service client built from SDK types (nothing is contacted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinker import types

from lightning_otel.adapters.triplets import Triplet
from lightning_otel.training.tinker.datums import group_datums, triplet_datum
from lightning_otel.training.tinker.engine import as_datum
from lightning_otel.training.tinker.remote_engine import (
    RemoteEngine,
    to_tinker_adam,
    to_tinker_datum,
    to_tinker_sampling,
)
from lightning_otel.training.tinker.types import AdamParams, Datum, SamplingParams


def triplet(rollout: str, response: list[int], *, mask: list[int] | None = None, logprobs: bool = True) -> Triplet:
    return Triplet(
        prompt_token_ids=[1, 2, 3],
        response_token_ids=response,
        response_logprobs=[-0.1 * (i + 1) for i in range(len(response))] if logprobs else None,
        response_mask=mask or [1] * len(response),
        reward=None, rewards={}, agent_name="player", rollout_id=rollout, attempt_id="a1",
        response_ids=[], span_ids=[],
    )  # fmt: skip


def test_a_sample_becomes_a_shifted_datum_with_observations_masked() -> None:
    datum = triplet_datum(triplet("r1", [4, 5, 6, 7], mask=[1, 1, 0, 1]), advantage=0.5, loss_fn="ppo")
    assert datum.model_input == [1, 2, 3, 4, 5, 6]
    assert datum.loss_fn_inputs["target_tokens"] == [2, 3, 4, 5, 6, 7]
    assert datum.loss_fn_inputs["advantages"] == [0.0, 0.0, 0.5, 0.5, 0.0, 0.5]  # token 6 was inserted by the agent
    assert datum.loss_fn_inputs["logprobs"] == pytest.approx([0, 0, -0.1, -0.2, 0, -0.4])
    supervised = triplet_datum(triplet("r1", [4, 5], mask=[1, 0]), advantage=0.0, loss_fn="cross_entropy")
    assert supervised.loss_fn_inputs == {"target_tokens": [2, 3, 4, 5], "weights": [0.0, 0.0, 1.0, 0.0]}


def test_advantages_are_rewards_minus_the_group_mean_per_rollout() -> None:
    groups = {
        "g1": [triplet("r1", [4]), triplet("r1", [5, 6]), triplet("r2", [7])],  # r1 made two calls
        "g2": [triplet("r3", [8]), triplet("r4", [9])],  # equal rewards: no signal
        "g3": [triplet("r5", [4], logprobs=False), triplet("r6", [5])],
    }
    rewards = {"r1": 1.0, "r2": 0.0, "r3": 0.5, "r4": 0.5, "r5": 1.0, "r6": None}
    batch = group_datums(groups, rewards)
    advantages = [max(d.loss_fn_inputs["advantages"], key=abs) for d in batch.datums]
    assert advantages == [0.5, 0.5, -0.5]  # mean over rollouts (0.5), not over the three samples
    assert (batch.groups, batch.constant_groups) == (3, 2)  # g3: only r5 is scored, a group of one
    assert batch.samples_without_reward == 1
    kept = group_datums(groups, rewards, keep_constant_groups=True)
    assert len(kept.datums) == 3 + 2  # g2 kept with advantage 0; g3's r5 has no logprobs
    assert kept.samples_without_logprobs == 1


def test_our_datum_is_the_sdk_datum_the_cookbook_builds() -> None:
    tokens = [11, 12, 13, 14, 15]
    ours = Datum.from_sequence(tokens, {"logprobs": [0, 0, -0.5, -0.25, -1.0], "advantages": [0, 0, 1, 1, -1]})
    sent = to_tinker_datum(ours)
    cookbook = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.array(tokens[1:], dtype=np.int64)),
            "logprobs": types.TensorData.from_numpy(np.array([0, -0.5, -0.25, -1.0], dtype=np.float32)),
            "advantages": types.TensorData.from_numpy(np.array([0, 1, 1, -1], dtype=np.float32)),
        },
    )
    assert isinstance(sent, types.Datum)
    assert sent.model_input.to_ints() == cookbook.model_input.to_ints() == tokens[:-1]
    for key, expected in cookbook.loss_fn_inputs.items():
        assert sent.loss_fn_inputs[key].dtype == expected.dtype, key
        assert sent.loss_fn_inputs[key].data == pytest.approx(expected.data), key
    assert as_datum(cookbook) == ours  # and back: a cookbook datum trains on the local engine


def test_optimizer_and_sampling_settings_map_field_for_field() -> None:
    ours = AdamParams(learning_rate=3e-4, beta1=0.8, beta2=0.99, eps=1e-9, weight_decay=0.1, grad_clip_norm=1.0)
    theirs = to_tinker_adam(ours)
    assert isinstance(theirs, types.AdamParams)
    fields = list(AdamParams.__dataclass_fields__)
    assert {name: getattr(theirs, name) for name in fields} == {name: getattr(ours, name) for name in fields}
    assert types.AdamParams().model_dump() == {name: getattr(AdamParams(), name) for name in fields}  # SDK defaults
    sampling = to_tinker_sampling(SamplingParams(max_tokens=7, temperature=0.5, seed=3), stop_token=99)
    assert (sampling.max_tokens, sampling.temperature, sampling.seed, list(sampling.stop)) == (7, 0.5, 3, [99])


class _Done:
    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


class RecordingService:
    """The SDK's ServiceClient surface the engine uses, answering with the SDK's own response types."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def create_lora_training_client(self, **options: Any) -> _Done:
        self.calls.append(("create_lora_training_client", options))
        return _Done(self)

    def forward_backward(self, data: list[Any], loss_fn: str, config: dict[str, float]) -> _Done:
        self.calls.append(("forward_backward", (data, loss_fn, config)))
        outputs = [{"logprobs": types.TensorData.from_numpy(np.zeros(d.model_input.length, np.float32))} for d in data]
        return _Done(types.ForwardBackwardOutput("ArrayRecord", outputs, {"loss:sum": -1.5}))

    def optim_step(self, params: Any) -> _Done:
        self.calls.append(("optim_step", params))
        return _Done(types.OptimStepResponse(metrics={"grad_norm": 0.25}))

    def save_weights_and_get_sampling_client(self) -> _Done:
        self.calls.append(("save_weights_and_get_sampling_client", None))
        return _Done(self)

    def sample(self, *, prompt: Any, num_samples: int, sampling_params: Any) -> _Done:
        self.calls.append(("sample", (prompt, num_samples, sampling_params)))
        sequence = types.SampledSequence(stop_reason="stop", sequence_id="s1", _tokens_list=[7, 8],
                                         _logprobs_list=[-0.5, -0.25])  # fmt: skip
        return _Done(types.SampleResponse(sequences=[sequence] * num_samples))


def test_remote_engine_sends_sdk_types(tiny_model_dir: Path) -> None:
    service = RecordingService()
    engine = RemoteEngine("Qwen/Qwen3-4B-Instruct-2507", rank=8, tokenizer=tiny_model_dir, service_client=service)
    assert service.calls[0] == ("create_lora_training_client", {
        "base_model": "Qwen/Qwen3-4B-Instruct-2507", "rank": 8, "seed": None, "train_mlp": True,
        "train_attn": True, "train_unembed": True,
    })  # fmt: skip
    datum = Datum.from_sequence([1, 2, 3], {"logprobs": [0, -1, -1], "advantages": [0, 1, 1]})
    output = engine.forward_backward([datum], "ppo", {"clip_low_threshold": 0.9})
    sent, loss_fn, config = service.calls[-1][1]
    assert isinstance(sent[0], types.Datum) and loss_fn == "ppo" and config == {"clip_low_threshold": 0.9}
    assert output.metrics == {"loss:sum": -1.5} and output.loss_fn_outputs == [{"logprobs": [0.0, 0.0]}]
    assert engine.optim_step(AdamParams(learning_rate=2e-4)).metrics == {"grad_norm": 0.25}
    assert isinstance(service.calls[-1][1], types.AdamParams) and service.calls[-1][1].learning_rate == 2e-4
    sampler = engine.save_weights_and_get_sampler("step-0")
    [sequence] = sampler.sample([5, 6], 1, SamplingParams(max_tokens=4))
    assert (sequence.tokens, sequence.logprobs, sequence.stop_reason, sampler.version) == ([7, 8], [-0.5, -0.25],
                                                                                           "stop", 0)  # fmt: skip
    prompt, _, params = service.calls[-1][1]
    assert prompt.to_ints() == [5, 6] and list(params.stop) == [engine.chat_tokenizer.eos_token_id]
    with pytest.raises(ValueError, match="lacks"):  # refused before any request
        engine.forward_backward([Datum([1], {"target_tokens": [2]})], "importance_sampling")
