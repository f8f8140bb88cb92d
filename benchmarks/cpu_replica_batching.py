"""The CPU replica answering a GRPO step's concurrent requests: batched (this version) vs one at a time (before).

    python -m benchmarks.cpu_replica_batching [--requests 64] [--group-size 8] [--max-tokens 48] [--threads 1]

Same model, same prompts, same API, side by side in one run: `--requests` chat completions sent at once over HTTP
(the OpenAI-compatible API the policy gateway forwards to) to
- one at a time: `CPUReplica(max_batch=1)`, which samples exactly as the replica did before batching;
- batched: `CPUReplica()` (waiting requests go together, up to 64);
- peer: Hugging Face `model.generate` on the same prompts, left padded, one batch, no HTTP (what a hand-written
  batch sampler would cost; it returns no per-token logprobs unless asked, so it does less work).
The model is the spider example's CPU policy shape (Llama, hidden 128, 4 layers, random weights: timing only), the
prompts ~500 tokens like its write_query prompt, asked `--group-size` times each (a GRPO group: the batched replica
reads each distinct prompt once). Prints wall seconds, generated tokens/s and the ratios. Needs the [verl] extra.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx
import torch

from lightning_otel.serving.cpu_replica import CPUReplica, HFChatTokenizer, ReplicaServer
from lightning_otel.testing import build_tokenizer
from lightning_otel.testing.tiny_model import tiny_policy

SCHEMA = " ".join(f"CREATE TABLE t{i} (id INTEGER, name TEXT, city TEXT, amount REAL);" for i in range(10))


def messages(i: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": f"Write one SQLite query for the question. Schema: {SCHEMA}"},
        {"role": "user", "content": f"How many rows of t{i % 10} have an amount over {i}?"},
    ]


async def send_all(base_url: str, n: int, max_tokens: int, group: int) -> tuple[float, int]:
    async with httpx.AsyncClient(base_url=base_url.rstrip("/") + "/", timeout=600) as client:
        started = time.perf_counter()
        sampling = {"max_tokens": max_tokens, "temperature": 1.0, "logprobs": True, "return_token_ids": True}
        bodies = [{"model": "agl-policy", "messages": messages(i // group), **sampling} for i in range(n)]
        responses = await asyncio.gather(*(client.post("chat/completions", json=body) for body in bodies))
        elapsed = time.perf_counter() - started
    tokens = 0
    for response in responses:
        response.raise_for_status()
        tokens += len(response.json()["choices"][0]["token_ids"])
    return elapsed, tokens


def served(
    model: torch.nn.Module, tokenizer: HFChatTokenizer, args: argparse.Namespace, max_batch: int
) -> tuple[float, int]:
    replica = CPUReplica(model, tokenizer, seed=0, max_batch=max_batch)
    with ReplicaServer(replica) as server:
        asyncio.run(send_all(server.base_url, 2, 4, 1))  # warm-up: the server, the model's first forward
        return asyncio.run(send_all(server.base_url, args.requests, args.max_tokens, args.group_size))


def hf_generate(model: torch.nn.Module, tokenizer: HFChatTokenizer, args: argparse.Namespace) -> tuple[float, int]:
    prompts = [tokenizer.encode(tokenizer.render_chat(messages(i // args.group_size))) for i in range(args.requests)]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    started = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.max_tokens, do_sample=True,
                             top_k=0, pad_token_id=0, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    elapsed = time.perf_counter() - started
    eos = tokenizer.eos_token_id
    tokens = sum(row.index(eos) + 1 if eos in row else len(row) for row in out[:, width:].tolist())
    return elapsed, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=8, help="requests per distinct prompt (1: all distinct)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the verl CPU replica's default: 1)")
    parser.add_argument("--quick", action="store_true", help="8 requests of 8 tokens, seconds: that it runs")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.group_size, args.max_tokens = 8, 4, 8
    torch.set_num_threads(args.threads)
    raw = build_tokenizer()
    tokenizer = HFChatTokenizer(raw) if hasattr(raw, "apply_chat_template") else raw
    model = tiny_policy(raw, hidden_size=128, layers=4, architecture="llama")
    prompt_tokens = len(tokenizer.encode(tokenizer.render_chat(messages(0))))
    print(f"{args.requests} concurrent chat requests ({args.group_size} per prompt), ~{prompt_tokens} prompt tokens, "
          f"up to {args.max_tokens} new "
          f"tokens, temperature 1, torch threads {args.threads}")  # fmt: skip
    rows = [
        ("one at a time (max_batch=1, as before)", served(model, tokenizer, args, 1)),
        ("batched (CPUReplica default)", served(model, tokenizer, args, 64)),
        ("peer: HF generate, one batch, no HTTP", hf_generate(model, tokenizer, args)),
    ]
    baseline = rows[0][1][0]
    print(f"{'path':<42} {'seconds':>8} {'tokens':>7} {'tokens/s':>9} {'speed-up':>9}")
    for name, (seconds, tokens) in rows:
        print(f"{name:<42} {seconds:>8.2f} {tokens:>7} {tokens / seconds:>9.0f} {baseline / seconds:>8.1f}x")


if __name__ == "__main__":
    main()
