"""The reward-model service under concurrent load: micro-batching against one forward pass per request, side by side.

    python -m benchmarks.reward_model_service [--requests 200] [--concurrency 50] [--model DIR]

The same model (default: the tiny offline Qwen2 with a one-label head) behind the real service (`lightning-otel
reward-model serve`, its own process, so the clients do not share its interpreter) on loopback, driven by
`--concurrency` clients each sending single-conversation `/score` requests (what agents scoring their answers
do), `--requests` in all, in two configurations measured alternately, three rounds each, best kept:
  batched    --max-batch 32 --max-wait-ms 5 (the default)
  unbatched  --max-batch 1  --max-wait-ms 0 (a forward pass per request: what a plain inference API does)
It prints requests/s, p50/p99 latency, forward passes, and the ratio. Scores are compared between the two runs: the
batch must not change them (padding is masked).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def conversations(count: int) -> list[list[dict[str, str]]]:
    return [
        [{"role": "user", "content": f"What is drug {i} used to treat?"},
         {"role": "assistant", "content": "It is used to treat " + "a common condition " * (1 + i % 5)}]
        for i in range(count)
    ]  # fmt: skip


async def drive(url: str, items: list, concurrency: int) -> tuple[float, list[float], list[float]]:
    latencies: list[float] = []
    scores: list[float] = [0.0] * len(items)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(items)):
        queue.put_nowait(index)

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            index = queue.get_nowait()
            started = time.perf_counter()
            answer = await http.post("/score", json={"inputs": [{"messages": items[index]}]})
            latencies.append(time.perf_counter() - started)
            scores[index] = answer.json()["data"][0]["score"]

    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=concurrency)) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        return time.perf_counter() - started, latencies, scores


def measure(model: str, items: list, concurrency: int, max_batch: int, wait_ms: float) -> dict:
    port = free_port()
    command = [sys.executable, "-m", "lightning_otel.cli", "reward-model", "serve", "--model", model, "--port",
               str(port), "--max-batch", str(max_batch), "--max-wait-ms", str(wait_ms)]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the reward model service did not start")
            time.sleep(0.2)
        seconds, latencies, scores = asyncio.run(drive(url, items, concurrency))
        batches = httpx.get(url + "/healthz").json()["batches"]["text"]["batches"]
    finally:
        server.terminate()
        server.wait(30)
    latencies.sort()
    return {"rps": len(items) / seconds, "p50": statistics.median(latencies) * 1000,
            "p99": latencies[int(0.99 * (len(latencies) - 1))] * 1000, "passes": batches, "scores": scores}  # fmt: skip


def offline_reward_model(hidden_size: int, layers: int) -> Path:
    """The offline Qwen2 of that size with a saved (untrained) one-label head: what `reward-model train` writes."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from lightning_otel.testing.tiny_model import save_tiny_model

    folder = Path(tempfile.mkdtemp())
    base = save_tiny_model(folder / "base", hidden_size=hidden_size, layers=layers)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model.config.pad_token_id = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    path = folder / f"rm-h{hidden_size}-l{layers}"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--model", help="a reward model folder (default: one built offline, see the next two)")
    parser.add_argument("--hidden-size", type=int, default=64, help="the offline model's width (64: the tiny one)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="20 requests, 5 at once, one round: that it runs")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.concurrency = 20, 5
    model = args.model or str(offline_reward_model(args.hidden_size, args.layers))
    items = conversations(args.requests)
    best: dict[str, dict] = {}
    for _ in range(1 if args.quick else 3):
        for name, batch, wait in (("batched", 32, 5.0), ("unbatched", 1, 0.0)):
            result = measure(model, items, args.concurrency, batch, wait)
            if name not in best or result["rps"] > best[name]["rps"]:
                best[name] = result
    print(f"reward-model service: {args.requests} single-conversation /score requests, {args.concurrency} at once, "
          f"model {Path(model).name}")  # fmt: skip
    for name, result in best.items():
        print(f"  {name:10s} {result['rps']:8.1f} req/s  p50 {result['p50']:7.1f} ms  p99 {result['p99']:7.1f} ms  "
              f"forward passes {result['passes']}")  # fmt: skip
    drift = max(abs(a - b) for a, b in zip(best["batched"]["scores"], best["unbatched"]["scores"], strict=True))
    print(
        f"  ratio batched / unbatched: {best['batched']['rps'] / best['unbatched']['rps']:.2f}x throughput; "
        f"largest score difference between the two: {drift:.2e}"
    )


if __name__ == "__main__":
    main()
