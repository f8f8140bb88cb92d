"""The local engine's update with a group's shared prompt read once, beside reading every row whole, same run.

    python -m benchmarks.shared_prefix_update [--model smollm2] [--prompt-tokens 300] [--repeats 3]
    python -m benchmarks.shared_prefix_update --quick          # the tiny model, small sizes (the tests)

A step of an agent whose prompt carries instructions and a tool's schema: 4 tasks x 8 rollouts, each rollout two
calls (the first continues the task's prompt, the second the prompt, the first reply and a tool's answer), so every
datum of a task begins with its prompt. Both arms are the same engine (LoRA rank 32) on the same datums: `forward_
backward` with `importance_sampling`, then the gradients cleared. Printed: seconds an update (median of the repeats),
the tokens each computed, the ratio, and the largest log-probability difference between the arms (they must agree).
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lightning_otel as agl
from lightning_otel.testing import model_or_tiny
from lightning_otel.training.tinker.types import Datum


def step_datums(vocab: int, prompt_tokens: int, reply_tokens: int, seed: int = 0) -> list[Datum]:
    """4 prompts x 8 rollouts x 2 calls, as a tool-calling agent's step gives them."""
    pick = random.Random(seed)
    datums = []
    for _ in range(4):
        prompt = [pick.randrange(10, vocab) for _ in range(prompt_tokens)]
        for _ in range(8):
            reply = [pick.randrange(10, vocab) for _ in range(reply_tokens)]
            tool = [pick.randrange(10, vocab) for _ in range(12)]
            answer = [pick.randrange(10, vocab) for _ in range(reply_tokens // 2)]
            for context, response in ((prompt, reply), (prompt + reply + tool, answer)):
                tokens = context + response
                advantage = [0.0] * len(context) + [pick.uniform(-1, 1)] * len(response)
                datums.append(Datum.from_sequence(tokens, {"advantages": advantage, "logprobs": [-2.0] * len(tokens)}))
    return datums


def timed(engine: agl.LocalEngine, datums: list[Datum], repeats: int) -> tuple[float, dict, list]:
    seconds, output = [], None
    for _ in range(repeats):
        began = time.perf_counter()
        output = engine.forward_backward(datums, "importance_sampling")
        seconds.append(time.perf_counter() - began)
        for parameter in engine.trainable:
            parameter.grad = None
    assert output is not None
    return statistics.median(seconds), output.metrics, output.loss_fn_outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="smollm2, tiny or a model folder")
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--reply-tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the tiny model, small sizes: that it runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.prompt_tokens, args.reply_tokens, args.repeats = "tiny", 48, 8, 1
    with tempfile.TemporaryDirectory() as work:
        folder = model_or_tiny(args.model, Path(work))
        shared = agl.LocalEngine(folder, rank=32, seed=0)
        whole = copy.deepcopy(shared)
        whole.min_shared_prefix = 10**9  # every row read whole
        vocab = shared.model.get_input_embeddings().num_embeddings
        datums = step_datums(vocab, args.prompt_tokens, args.reply_tokens)
        whole_s, whole_metrics, whole_out = timed(whole, datums, args.repeats)
        shared_s, shared_metrics, shared_out = timed(shared, datums, args.repeats)
    gap = max(abs(a - b) for x, y in zip(shared_out, whole_out, strict=True)
              for a, b in zip(x["logprobs"], y["logprobs"], strict=True))  # fmt: skip
    print(f"{args.model}: {len(datums)} datums (4 prompts of {args.prompt_tokens} tokens x 8 rollouts x 2 calls), "
          f"median of {args.repeats}")  # fmt: skip
    print(f"  whole rows:    {whole_s:7.2f} s, {whole_metrics['computed_tokens:sum']:.0f} tokens computed")
    print(f"  shared prefix: {shared_s:7.2f} s, {shared_metrics['computed_tokens:sum']:.0f} tokens computed")
    print(f"  ratio shared / whole: {shared_s / whole_s:.2f}; largest log-probability difference {gap:.2e}")
    if gap > 1e-3:
        print("shared_prefix_update: FAILED: the arms disagree", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
