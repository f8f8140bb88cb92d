"""An engine's sampler behind vLLM's API: token ids and logprobs as the sampler made them, the sampler's version in
every answer (whole or streamed), and a swapped sampler's version from the next request on."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from lightning_otel import semconv
from lightning_otel.serving.sampler_api import ReplicaServer
from lightning_otel.training.tinker.engine import EngineSamplerReplica
from lightning_otel.training.tinker.local_engine import LocalEngine
from lightning_otel.training.tinker.types import AdamParams, Datum

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
