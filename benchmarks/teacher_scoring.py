"""On-policy distillation's teacher scoring a step's samples: batched with each group's prompt read once (this
version), beside one forward a sample (before), same run.

    python -m benchmarks.teacher_scoring [--model smollm2] [--prompt-tokens 500] [--reply-tokens 64] [--repeats 3]
    python -m benchmarks.teacher_scoring --quick          # the tiny model, small sizes (the tests)

A step of the SQL example with self-distillation: 4 tasks x 8 rollouts, each sample the teacher's context (a system
turn with the gold query), the task's prompt (instructions and the schema: `--prompt-tokens`) and the reply sampled
(`--reply-tokens`). Both arms are the same sampler on the same sequences: `compute_logprobs` on each sequence in
turn, and `compute_logprobs_many` on all of them. Printed: seconds a step's scoring (median of the repeats), the
ratio, and the largest logprob difference between the arms (they must agree).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import lightning_otel as agl
from lightning_otel.testing import model_or_tiny


def step_sequences(vocab: int, prompt_tokens: int, reply_tokens: int, seed: int = 0) -> list[list[int]]:
    """4 tasks x 8 rollouts: context + prompt (a task's own) + a reply of its own length."""
    pick = random.Random(seed)
    sequences = []
    for _ in range(4):
        prompt = [pick.randrange(10, vocab) for _ in range(prompt_tokens)]
        for _ in range(8):
            reply = [pick.randrange(10, vocab) for _ in range(pick.randint(reply_tokens // 2, reply_tokens))]
            sequences.append(prompt + reply)
    pick.shuffle(sequences)  # as a step's samples come: groups interleaved
    return sequences


def timed(score: Callable[[], list[list[float | None]]], repeats: int) -> tuple[float, list[list[float | None]]]:
    seconds, scored = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        scored = score()
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds), scored


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="smollm2, tiny or a model folder")
    parser.add_argument("--prompt-tokens", type=int, default=500)
    parser.add_argument("--reply-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the tiny model, small sizes: that it runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.model, args.prompt_tokens, args.reply_tokens, args.repeats = "tiny", 48, 8, 1
    with tempfile.TemporaryDirectory() as work:
        engine = agl.LocalEngine(model_or_tiny(args.model, Path(work)), rank=32, seed=0)
        sampler = engine.save_weights_and_get_sampler("teacher")
        vocab = engine.model.get_input_embeddings().num_embeddings
        sequences = step_sequences(vocab, args.prompt_tokens, args.reply_tokens)
        alone_s, alone = timed(lambda: [sampler.compute_logprobs(ids) for ids in sequences], args.repeats)
        batched_s, batched = timed(lambda: sampler.compute_logprobs_many(sequences), args.repeats)
    gap = max(abs(a - b) for x, y in zip(alone, batched, strict=True)
              for a, b in zip(x[1:], y[1:], strict=True))  # fmt: skip
    tokens = sum(len(ids) for ids in sequences)
    print(f"{args.model}: {len(sequences)} sequences (4 prompts of {args.prompt_tokens} tokens x 8 replies of up to "
          f"{args.reply_tokens}; {tokens} tokens), median of {args.repeats}")  # fmt: skip
    print(f"  one at a time: {alone_s:7.2f} s")
    print(f"  batched:       {batched_s:7.2f} s")
    print(f"  ratio batched / one at a time: {batched_s / alone_s:.2f}; largest logprob difference {gap:.2e}")
    if gap > 1e-3:
        print("teacher_scoring: FAILED: the arms disagree", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
