"""An engine's sampler behind vLLM's API: token ids and logprobs as the sampler made them, the sampler's version in
every answer (whole or streamed), and a swapped sampler's version from the next request on."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from lightning_otel import semconv
from lightning_otel.serving.sampler_api import ReplicaServer
from lightning_otel.training.tinker.engine import EngineSamplerReplica
from lightning_otel.training.tinker.local_engine import LocalEngine
from lightning_otel.training.tinker.types import AdamParams, Datum, SampledSequence, SamplingParams

BODY = {"model": "agl-policy", "messages": [{"role": "user", "content": "Who are you?"}], "max_tokens": 5,
        "return_token_ids": True, "logprobs": True}  # fmt: skip


def test_answers_name_the_sampler_version(tiny_model_dir: Path) -> None:
    engine = LocalEngine(tiny_model_dir, rank=4)
    replica = EngineSamplerReplica(engine.save_weights_and_get_sampler("a"), engine.chat_tokenizer)
    with ReplicaServer(replica) as server:
        url = f"{server.base_url}/chat/completions"
        whole = httpx.post(url, json=BODY, timeout=60).json()
        assert whole[semconv.POLICY_VERSION_FIELD] == 0
        choice = whole["choices"][0]
        assert len(choice["token_ids"]) == len(choice["logprobs"]["content"]) >= 1

        engine.forward_backward([Datum([1, 2], {"target_tokens": [2, 3], "weights": [1.0, 1.0]})], "cross_entropy")
        engine.optim_step(AdamParams(learning_rate=1e-2))
        replica.use(engine.save_weights_and_get_sampler("b"))
        with httpx.stream("POST", url, json={**BODY, "stream": True}, timeout=60) as response:
            chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
        assert chunks[0][semconv.POLICY_VERSION_FIELD] == 1  # the first chunk, beside the prompt's token ids
        assert "prompt_token_ids" in chunks[0]


class _Gathering:
    """A sampler that answers only once `expected` requests are inside it at the same time (a barrier)."""

    version = 3

    def __init__(self, expected: int) -> None:
        self.barrier = threading.Barrier(expected, timeout=20)

    def sample(self, prompt: list[int], num_samples: int, params: SamplingParams) -> list[SampledSequence]:
        self.barrier.wait()  # BrokenBarrierError if the replica let fewer in at once
        return [SampledSequence([prompt[-1] + 1], [-0.5], "length")]


class _GatheringAsync:
    version = 4

    def __init__(self, expected: int) -> None:
        self.expected, self.inside, self.peak = expected, 0, 0

    def sample(self, prompt: list[int], num_samples: int, params: SamplingParams) -> list[SampledSequence]:
        raise AssertionError("the replica must await sample_async when the sampler has it")

    async def sample_async(self, prompt: list[int], num_samples: int,
                           params: SamplingParams) -> list[SampledSequence]:  # fmt: skip
        self.inside += 1
        self.peak = max(self.peak, self.inside)
        deadline = asyncio.get_running_loop().time() + 20
        while self.peak < self.expected and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        self.inside -= 1
        return [SampledSequence([prompt[-1] + 1], [-0.5], "length")]


def _concurrent_answers(replica: EngineSamplerReplica, count: int) -> list[dict]:
    with ReplicaServer(replica) as server, ThreadPoolExecutor(count) as pool:
        url = f"{server.base_url}/chat/completions"
        return list(pool.map(lambda _: httpx.post(url, json=BODY, timeout=60).json(), range(count)))


def test_every_open_request_reaches_a_sync_sampler_at_once(tiny_model_dir: Path) -> None:
    # 12 > asyncio's default executor on a 2-core machine (6 threads): a step's requests must not queue behind it
    tokenizer = LocalEngine(tiny_model_dir, rank=4).chat_tokenizer
    answers = _concurrent_answers(EngineSamplerReplica(_Gathering(12), tokenizer), 12)
    assert [answer[semconv.POLICY_VERSION_FIELD] for answer in answers] == [3] * 12


def test_a_sampler_with_sample_async_is_awaited_with_every_open_request(tiny_model_dir: Path) -> None:
    tokenizer = LocalEngine(tiny_model_dir, rank=4).chat_tokenizer
    sampler = _GatheringAsync(12)
    answers = _concurrent_answers(EngineSamplerReplica(sampler, tokenizer), 12)
    assert sampler.peak == 12 and [answer[semconv.POLICY_VERSION_FIELD] for answer in answers] == [4] * 12
    assert all(answer["choices"][0]["token_ids"] for answer in answers)


def test_local_sampler_async_samples_what_sample_does(tiny_model_dir: Path) -> None:
    # one request's n samples: the same streams (seeded by prompt and draw count) whichever way they are asked
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=7)
    prompt = [5, 6, 7]
    direct = LocalEngine(tiny_model_dir, rank=4, seed=1).save_weights_and_get_sampler("a").sample(prompt, 4, params)
    sampler = LocalEngine(tiny_model_dir, rank=4, seed=1).save_weights_and_get_sampler("a")
    awaited = asyncio.run(sampler.sample_async(prompt, 4, params))
    assert [(s.tokens, s.logprobs) for s in awaited] == [(s.tokens, s.logprobs) for s in direct]


def test_reading_the_prompts_computes_the_last_positions_logits_only(tiny_model_dir: Path) -> None:
    """The prefill's logits over every prompt position were the sampler's largest allocation (64 SQL prompts on
    SmolLM2: 8.8 GB, and a run killed for memory); only the last position's are sampled from."""
    sampler = LocalEngine(tiny_model_dir, rank=4, seed=1).save_weights_and_get_sampler("a")  # a PEFT model
    widths: list[int] = []
    head = sampler._replica.model.get_output_embeddings()
    hook = head.register_forward_hook(lambda module, args, output: widths.append(output.shape[1]))
    try:
        samples = sampler.sample(list(range(5, 45)), 2, SamplingParams(max_tokens=3, temperature=1.0, seed=7))
    finally:
        hook.remove()
    assert [len(s.tokens) for s in samples] == [3, 3]
    assert widths and set(widths) == {1}  # the prefill of 40 tokens, then one token a step
