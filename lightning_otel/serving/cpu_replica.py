"""A CPU policy replica: a Hugging Face causal LM behind the same OpenAI-compatible API vLLM serves.

    tokenizer = build_tokenizer(); model = tiny_policy(tokenizer)          # lightning_otel.testing: offline model
    replica = CPUReplica(model, tokenizer)
    with ReplicaServer(replica) as server:                                  # server.base_url -> the gateway's replica
        replica.update_weights(new_state_dict)                              # what a trainer's weight sync calls

It answers `/v1/chat/completions` and `/v1/completions` in vLLM's format: top-level `prompt_token_ids`, per choice
`token_ids`, and `logprobs` of the sampled tokens (log-softmax of the logits at the request's temperature, which is
what a trainer recomputes), streaming included. So the gateway, the instrumentors and the adapter see exactly what
they see in front of vLLM, and CPU runs exercise the same path as GPU ones.

Requests that arrive while a batch is being sampled wait and go together in the next one (up to `max_batch`, left
padded, each with its own temperature, top_p and max_tokens), and identical prompts in a batch (a GRPO group's n
rollouts of one task) are read once, their KV cache shared: a small policy's cost is mostly reading long prompts.
No timer: an idle replica starts a lone request at once. Sampling is reproducible whatever the batching: a request
draws from its own random stream, seeded by the replica's seed, the weight version, the prompt and how many samples
of that prompt this version drew before (a GRPO group's n rollouts are n streams), so a run's samples do not depend
on which requests happened to arrive together. `weight_version` is the version a trainer serves the weights as
(counting updates when none says), and every answer names the version that sampled it (the API is `sampler_api`'s,
shared with the Tinker backend's samplers). Needs torch and transformers (the `[verl]` extra brings both).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import torch

from lightning_otel.serving.sampler_api import (  # the API's names, importable from here as before
    ChatTokenizerLike,
    Generation,
    HFChatTokenizer,
    ReplicaServer,
    SamplerReplica,
)

__all__ = [
    "CPUReplica",
    "ChatTokenizerLike",
    "Generation",
    "HFChatTokenizer",
    "ReplicaServer",
    "SamplerReplica",
    "serve_folder",
]


@dataclass(frozen=True, slots=True)
class _Request:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float


def last_logits_only(model: torch.nn.Module) -> dict[str, int]:
    """The forward option that computes the logits of the last position only, where the model takes it: reading a
    batch of prompts needs no other, and all of them cost rows x prompt length x vocabulary floats (64 prompts of 700
    tokens over SmolLM2's 49,152 words: 8.8 GB)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT model passes it on
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(base.forward).parameters else {}


class CPUReplica(SamplerReplica):
    MAX_TRACKED_PROMPTS = 100_000  # per weight version: how many distinct prompts' draw counts are kept

    def __init__(self, model: torch.nn.Module, tokenizer: ChatTokenizerLike, *, model_name: str = "agl-policy",
                 seed: int = 0, max_batch: int = 64, max_model_len: int | None = None,
                 tool_call_parser: str | None = "hermes") -> None:  # fmt: skip
        # the context vLLM would serve: the model's own positions unless told (`max_model_len`)
        positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        super().__init__(tokenizer, model_name=model_name, max_model_len=max_model_len or positions,
                         tool_call_parser=tool_call_parser)  # fmt: skip
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.model = model.eval()
        self.max_batch = max_batch
        self._prefill_options = last_logits_only(model)
        self._vocab_size = int(model.get_input_embeddings().num_embeddings)
        self._seed = seed
        self._draws: dict[bytes, int] = {}  # prompt digest -> samples drawn with this weight version and seed
        self._draw_epoch = 0  # bumped when `_draws` is cleared for size, so streams never repeat
        self._lock = threading.Lock()  # one batch (or weight update) at a time
        self._queue_lock = threading.Lock()
        self._waiting: list[tuple[_Request, Future[Generation]]] = []
        self._draining = False

    def reseed(self, seed: int) -> None:
        """Restart the sampling streams from `seed` (a request asking for reproducible samples)."""
        with self._lock:
            self._seed = seed
            self._draws.clear()
            self._draw_epoch = 0

    def _stream(self, prompt_ids: Sequence[int]) -> torch.Generator:
        """The random stream of the next sample of this prompt (called under `_lock`, in request order)."""
        digest = hashlib.blake2b(repr(tuple(prompt_ids)).encode(), digest_size=16).digest()
        if digest not in self._draws and len(self._draws) >= self.MAX_TRACKED_PROMPTS:
            self._draws.clear()  # a long-serving replica: bounded memory, a new epoch keeps streams distinct
            self._draw_epoch += 1
        drawn = self._draws.get(digest, 0)
        self._draws[digest] = drawn + 1
        key = f"{self._seed}/{self.weight_version}/{self._draw_epoch}/{drawn}".encode()
        seed = int.from_bytes(hashlib.blake2b(key + digest, digest_size=8).digest(), "little") & (2**63 - 1)
        return torch.Generator().manual_seed(seed)

    def generate(self, prompt_ids: Sequence[int], *, max_tokens: int = 64, temperature: float = 1.0,
                 top_p: float = 1.0) -> Generation:  # fmt: skip
        """Sample one answer (batched with whatever else is waiting); blocks until it is done."""
        return self._submit(prompt_ids, max_tokens, temperature, top_p).result()

    async def agenerate(self, prompt_ids: Sequence[int], *, max_tokens: int = 64, temperature: float = 1.0,
                        top_p: float = 1.0) -> Generation:  # fmt: skip
        """`generate` for an event loop: waits without holding a thread, so every open request can join a batch."""
        return await asyncio.wrap_future(self._submit(prompt_ids, max_tokens, temperature, top_p))

    def generate_many(self, prompts: Sequence[Sequence[int]], *, max_tokens: int = 64, temperature: float = 1.0,
                      top_p: float = 1.0) -> list[Generation]:  # fmt: skip
        """Sample an answer to each prompt, together (in batches of `max_batch`), in the prompts' order. The prompts
        are queued at once, so a group of one prompt's samples is not split by a drain that starts between them."""
        futures = self._submit_all([(prompt, max_tokens, temperature, top_p) for prompt in prompts])
        return [future.result() for future in futures]

    async def agenerate_many(self, prompts: Sequence[Sequence[int]], *, max_tokens: int = 64,
                             temperature: float = 1.0, top_p: float = 1.0) -> list[Generation]:  # fmt: skip
        """`generate_many` for an event loop (queued together, awaited without holding a thread)."""
        futures = self._submit_all([(prompt, max_tokens, temperature, top_p) for prompt in prompts])
        return list(await asyncio.gather(*map(asyncio.wrap_future, futures)))

    def _submit(self, prompt_ids: Sequence[int], max_tokens: int, temperature: float,
                top_p: float) -> Future[Generation]:  # fmt: skip
        (future,) = self._submit_all([(prompt_ids, max_tokens, temperature, top_p)])
        return future

    def _submit_all(self, asks: Sequence[tuple[Sequence[int], int, float, float]]) -> list[Future[Generation]]:
        """Queue the requests together (all or none: each is checked first) and start a drain if none runs."""
        requests = [_Request(list(ids), int(max_tokens), float(temperature), float(top_p))
                    for ids, max_tokens, temperature, top_p in asks]  # fmt: skip
        for request in requests:
            if not request.prompt_ids:
                raise ValueError("the prompt has no tokens")
            # checked here, not in the batch: one bad request must not fail the others sampled with it
            if min(request.prompt_ids) < 0 or max(request.prompt_ids) >= self._vocab_size:
                raise ValueError(f"prompt token ids must be in [0, {self._vocab_size}) (the model's vocabulary)")
        futures: list[Future[Generation]] = [Future() for _ in requests]
        with self._queue_lock:
            self._waiting.extend(zip(requests, futures, strict=True))
            if self._draining or not requests:  # the running drain takes them in coming batches
                return futures
            self._draining = True
        threading.Thread(target=self._drain, name="agl-cpu-replica", daemon=True).start()
        return futures

    def _drain(self) -> None:
        """Sample batches of waiting requests until none is left (then this thread ends: no idle thread stays).
        The batch is taken once the replica is free, so requests that came during a weight update go together."""
        while True:
            with self._lock:
                with self._queue_lock:
                    if not self._waiting:
                        self._draining = False
                        return
                    batch, self._waiting = self._waiting[: self.max_batch], self._waiting[self.max_batch :]
                try:
                    generations = self._sample_batch([request for request, _ in batch])
                except BaseException as exc:  # each waiting caller gets the error
                    for _, future in batch:
                        future.set_exception(exc)
                    continue
            for (_, future), generation in zip(batch, generations, strict=True):
                future.set_result(generation)

    @torch.no_grad()
    def _sample_batch(self, requests: list[_Request]) -> list[Generation]:
        """Read each distinct prompt once (left padded), share its KV cache among the rows that asked it, then one
        forward per token; a row stops at the end token or its max_tokens. Each logprob is
        log-softmax(logits / temperature) of the token (greedy: temperature 1)."""
        device = next(self.model.parameters()).device  # a replica on a GPU samples there
        distinct: dict[tuple[int, ...], int] = {}
        source = [distinct.setdefault(tuple(request.prompt_ids), len(distinct)) for request in requests]
        prompts = list(distinct)
        width = max(map(len, prompts))
        ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        output = self.model(input_ids=ids.to(device), attention_mask=mask.to(device),
                            position_ids=positions.to(device), use_cache=True, **self._prefill_options)  # fmt: skip
        past, logits = output.past_key_values, output.logits[:, -1].float().cpu()
        if len(prompts) < len(requests):  # rows of one prompt: copies of its cache (what beam search does)
            rows = torch.tensor(source)
            past.reorder_cache(rows.to(device))
            logits, mask, positions = logits[rows], mask[rows], positions[rows]
        next_position = positions[:, -1] + 1
        streams = [self._stream(r.prompt_ids) if r.temperature > 0 else None for r in requests]
        temperatures = torch.tensor([r.temperature for r in requests])
        top_ps = torch.tensor([r.top_p for r in requests])
        sampled: list[list[int]] = [[] for _ in requests]
        logprobs: list[list[float]] = [[] for _ in requests]
        finish = ["length"] * len(requests)
        active = [r.max_tokens > 0 for r in requests]
        while any(active):
            tokens, token_logprobs = self._pick(logits, temperatures, top_ps, streams)
            for row, request in enumerate(requests):
                if not active[row]:
                    continue
                sampled[row].append(int(tokens[row]))
                logprobs[row].append(float(token_logprobs[row]))
                if tokens[row] == self.tokenizer.eos_token_id:
                    finish[row], active[row] = "stop", False
                elif len(sampled[row]) >= request.max_tokens:
                    active[row] = False
            if not any(active):
                break
            # finished rows keep decoding (cheap at this size); their tokens are not kept
            mask = torch.cat([mask, torch.ones(len(requests), 1, dtype=mask.dtype)], dim=1)
            output = self.model(input_ids=tokens[:, None].to(device), attention_mask=mask.to(device),
                                position_ids=next_position[:, None].to(device), past_key_values=past,
                                use_cache=True)  # fmt: skip
            past, logits = output.past_key_values, output.logits[:, -1].float().cpu()
            next_position = next_position + 1
        version = self.weight_version
        return [Generation(sampled[row], logprobs[row], finish[row], version) for row in range(len(requests))]

    @staticmethod
    def _pick(logits: torch.Tensor, temperatures: torch.Tensor, top_ps: torch.Tensor,
              streams: Sequence[torch.Generator | None]) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Per row: argmax where temperature <= 0, else a sample of softmax(logits / T) kept to the top_p nucleus,
        drawn by inverse CDF with one uniform from the row's own stream."""
        greedy = temperatures <= 0
        scores = torch.log_softmax(logits / torch.where(greedy, 1.0, temperatures)[:, None], dim=-1)
        tokens = scores.argmax(dim=-1)
        if not bool(greedy.all()):
            probs = scores.exp()
            if bool((top_ps < 1.0).any()):
                ordered, order = torch.sort(probs, dim=-1, descending=True)
                keep = (torch.cumsum(ordered, dim=-1) - ordered < top_ps[:, None]) | (top_ps >= 1.0)[:, None]
                probs = torch.zeros_like(probs).scatter(1, order, ordered * keep)
            uniforms = torch.tensor([float(torch.rand((), generator=g)) if g is not None else 0.0 for g in streams])
            cdf = probs.cumsum(dim=-1)
            drawn = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None], right=True).squeeze(1)
            tokens = torch.where(greedy, tokens, drawn.clamp(max=probs.shape[-1] - 1))
        return tokens, scores.gather(1, tokens[:, None]).squeeze(1)

    def update_weights(self, state_dict: Mapping[str, torch.Tensor] | None, version: int | None = None) -> int:
        """Load new policy weights between batches (a trainer's weight sync) and serve them as `version` (a trainer's
        count; None: the next number); returns the version. `state_dict` None: the same weights, renamed (a step
        that trained nothing publishes them under its own number).

        Tied weights (a `lm_head` that is the embedding) may be absent; any other missing or unknown name is an
        error: a partial sync would serve a policy the trainer never had."""
        with self._lock:
            if state_dict is not None:
                result = self.model.load_state_dict(state_dict, strict=False)
                owned = {name for name, _ in self.model.named_parameters()}  # tied copies are listed once
                missing = [name for name in result.missing_keys if name in owned]
                if missing or result.unexpected_keys:
                    unexpected = result.unexpected_keys[:5]
                    raise ValueError(f"weight sync mismatch: missing {missing[:5]}, unexpected {unexpected}")
            self.weight_version = self.weight_version + 1 if version is None else version
            self._draws.clear()  # the new version's streams are keyed by it
            return self.weight_version


@contextlib.contextmanager
def serve_folder(folder: str | Path, *, seed: int = 0, model_name: str = "agl-policy") -> Iterator[str]:
    """A Hugging Face model folder served on loopback as vLLM serves it (its chat template, token ids, the hermes
    tool parser), for a dry run or an evaluation against a real model: the base URL while the block runs."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = HFChatTokenizer(AutoTokenizer.from_pretrained(folder))
    replica = CPUReplica(AutoModelForCausalLM.from_pretrained(folder), tokenizer, model_name=model_name, seed=seed)
    with ReplicaServer(replica) as server:
        yield server.base_url
