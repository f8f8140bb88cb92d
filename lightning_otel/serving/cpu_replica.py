"""A CPU policy replica: a Hugging Face causal LM behind the same OpenAI-compatible API vLLM serves.

    tokenizer = build_tokenizer(); model = tiny_policy(tokenizer)          # lightning_otel.testing: offline model
    replica = CPUReplica(model, tokenizer)
    with ReplicaServer(replica) as server:                                  # server.base_url -> the gateway's replica
        replica.update_weights(new_state_dict)                              # what a trainer's weight sync calls

It answers `/v1/chat/completions` and `/v1/completions` in vLLM's format: top-level `prompt_token_ids`, per choice
`token_ids`, and `logprobs` of the sampled tokens (log-softmax of the logits at the request's temperature, which is
what a trainer recomputes), streaming included. So the gateway, the instrumentors and the adapter see exactly what
they see in front of vLLM, and CPU runs exercise the same path as GPU ones. One generation at a time (a lock);
`weight_version` counts updates, and every answer names the version that sampled it (the API is `sampler_api`'s,
shared with the Tinker backend's samplers). Needs torch and transformers (the `[verl]` extra brings both).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import torch

from lightning_otel.serving.sampler_api import (  # the API's names, importable from here as before
    ChatTokenizerLike,
    Generation,
    HFChatTokenizer,
    ReplicaServer,
    SamplerReplica,
)

__all__ = ["CPUReplica", "ChatTokenizerLike", "Generation", "HFChatTokenizer", "ReplicaServer", "SamplerReplica"]


class CPUReplica(SamplerReplica):
    def __init__(self, model: torch.nn.Module, tokenizer: ChatTokenizerLike, *, model_name: str = "agl-policy",
                 seed: int = 0) -> None:  # fmt: skip
        super().__init__(tokenizer, model_name=model_name)
        self.model = model.eval()
        self._generator = torch.Generator().manual_seed(seed)
        self._lock = threading.Lock()

    def reseed(self, seed: int) -> None:
        """Restart the sampling stream from `seed` (a request asking for reproducible samples)."""
        with self._lock:
            self._generator.manual_seed(seed)

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[int], *, max_tokens: int = 64, temperature: float = 1.0,
                 top_p: float = 1.0) -> Generation:  # fmt: skip
        """Sample token by token with a KV cache; each logprob is log-softmax(logits / temperature) of the token."""
        with self._lock:
            device = next(self.model.parameters()).device  # a replica on a GPU samples there
            ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
            sampled: list[int] = []
            logprobs: list[float] = []
            past = None
            finish = "length"
            for _ in range(max_tokens):
                output = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = output.past_key_values
                logits = output.logits[0, -1].float().cpu()
                if temperature <= 0:
                    token = int(torch.argmax(logits))
                    logprob = float(torch.log_softmax(logits, dim=-1)[token])
                else:
                    scores = torch.log_softmax(logits / temperature, dim=-1)
                    token = self._sample(scores, top_p)
                    logprob = float(scores[token])
                sampled.append(token)
                logprobs.append(logprob)
                if token == self.tokenizer.eos_token_id:
                    finish = "stop"
                    break
                ids = torch.tensor([[token]], dtype=torch.long, device=device)
            return Generation(sampled, logprobs, finish, self.weight_version)

    def _sample(self, scores: torch.Tensor, top_p: float) -> int:
        probs = scores.exp()
        if top_p < 1.0:
            ordered, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(ordered, dim=-1) - ordered < top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], ordered[keep])
        return int(torch.multinomial(probs / probs.sum(), 1, generator=self._generator))

    def update_weights(self, state_dict: Mapping[str, torch.Tensor]) -> int:
        """Load new policy weights between requests (a trainer's weight sync); returns the new version.

        Tied weights (a `lm_head` that is the embedding) may be absent; any other missing or unknown name is an
        error: a partial sync would serve a policy the trainer never had."""
        with self._lock:
            result = self.model.load_state_dict(state_dict, strict=False)
            owned = {name for name, _ in self.model.named_parameters()}  # tied copies are listed once
            missing = [name for name in result.missing_keys if name in owned]
            if missing or result.unexpected_keys:
                unexpected = result.unexpected_keys[:5]
                raise ValueError(f"weight sync mismatch: missing {missing[:5]}, unexpected {unexpected}")
            self.weight_version += 1
            return self.weight_version
