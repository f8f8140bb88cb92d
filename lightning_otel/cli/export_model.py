"""`lightning-otel export-model SOURCE OUT`: a trained policy as a plain Hugging Face folder, from any checkpoint.

    lightning-otel export-model runs/capitals-20261204-153012 capitals-model          # a run: its latest checkpoint
    lightning-otel export-model runs/capitals-20261204-153012/checkpoints/step-8 m8   # a Tinker step's LoRA adapter
    lightning-otel export-model checkpoints/.../global_step_20 demo-model             # a verl checkpoint

What `lightning-otel train` writes into a run's `model/` after its last step (`lightning_otel.runs.model_export`):
full weights transformers loads and vLLM serves, with the tokenizer and chat template; from a LoRA adapter the merged
model and the adapter itself in `adapter/`.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a run folder (its latest checkpoint), a Tinker checkpoint (a LoRA adapter "
                        "folder), a verl checkpoint (global_step_N) or a model folder")  # fmt: skip
    parser.add_argument("out", help="the folder to write (replaced if it exists)")
    parser.add_argument("--base", help="a LoRA adapter's base model folder (default: the one its config names)")


def run(args: argparse.Namespace) -> int:
    from lightning_otel.runs.model_export import NotACheckpoint, export_model

    try:
        export_model(args.source, args.out, base=args.base)
    except (NotACheckpoint, OSError) as exc:
        print(f"lightning-otel export-model: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: a Hugging Face model folder (transformers loads it; export.json says what it was made from)")
    return 0


__all__ = ["add_arguments", "run"]
