"""`lightning-otel reward-model convert | train | serve`: the reward-model workflow of the AgentGRPO tutorial.

lightning-otel reward-model convert --input raw.jsonl --output pairs.jsonl
lightning-otel reward-model train --model MODEL_DIR --data pairs.jsonl --output rm/ [--lora] [--epochs 3]
lightning-otel reward-model serve --model rm/ [--port 8010] [--api-key KEY]
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from pathlib import Path

from lightning_otel.collector.tcp_listener import port_number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    steps = parser.add_subparsers(dest="step", required=True)
    convert = steps.add_parser("convert", help="raw rated answers (JSONL) -> TRL preference pairs (JSONL)")
    convert.add_argument("--input", required=True, type=Path)
    convert.add_argument("--output", required=True, type=Path)
    convert.add_argument("--skip-bad", action="store_true", help="skip malformed lines (counted) instead of failing")
    convert.add_argument("--margin", action="store_true", help="keep score differences as TRL's `margin`")
    train = steps.add_parser("train", help="train a reward model with TRL's RewardTrainer")
    train.add_argument("--model", required=True, help="the base model folder (a causal LM; a head is added)")
    train.add_argument("--data", required=True, type=Path, help="preference pairs from `convert`")
    train.add_argument("--output", required=True, type=Path)
    train.add_argument("--epochs", type=float, default=3.0)
    train.add_argument("--learning-rate", type=float, default=5e-5)
    train.add_argument("--batch-size", type=int, default=8)
    train.add_argument("--heldout", type=float, default=0.2, help="share of questions held out (default 0.2)")
    train.add_argument("--lora", action="store_true", help="train LoRA adapters (merged into the saved model)")
    train.add_argument("--lora-rank", type=int, default=16)
    train.add_argument("--max-length", type=int, default=1024)
    train.add_argument("--seed", type=int, default=0)
    serve = steps.add_parser("serve", help="serve a reward model: /score, /score-pair, /classify, /healthz")
    serve.add_argument("--model", required=True, type=Path, help="a trained reward model folder")
    serve.add_argument("--name", help="the served model name (default: the folder's name)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port_number, default=8010)
    serve.add_argument(
        "--api-key",
        default=os.environ.get("AGL_REWARD_MODEL_API_KEY"),
        help="require `Authorization: Bearer KEY` (needed to listen beyond loopback)",
    )
    serve.add_argument("--max-batch", type=int, default=32, help="conversations scored in one forward pass")
    serve.add_argument("--max-wait-ms", type=float, default=5.0, help="how long a batch waits for more requests")
    serve.add_argument("--max-length", type=int, default=1024)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def run(args: argparse.Namespace) -> int:
    if args.step == "convert":
        from lightning_otel.training.reward_model.preferences import convert

        try:
            report = convert(args.input, args.output, skip_bad=args.skip_bad, with_margin=args.margin)
        except (ValueError, OSError) as exc:
            print(f"lightning-otel reward-model convert: {exc}", file=sys.stderr)
            return 1
        print(f"{report.pairs} preference pairs from {report.lines} lines -> {args.output}")
        if report.skipped_lines:
            print(
                f"SKIPPED {report.skipped_lines} malformed line(s):", *report.errors[:10], sep="\n  ", file=sys.stderr
            )
        if report.lines_without_pairs:
            print(f"{report.lines_without_pairs} line(s) gave no pair (every answer rated the same)", file=sys.stderr)
        return 0
    if args.step == "train":
        from lightning_otel.training.reward_model.train import TooFewPairs, train_reward_model

        try:
            result = train_reward_model(
                args.model,
                args.data,
                args.output,
                epochs=args.epochs,
                learning_rate=args.learning_rate,
                batch_size=args.batch_size,
                heldout_fraction=args.heldout,
                lora=args.lora,
                lora_rank=args.lora_rank,
                max_length=args.max_length,
                seed=args.seed,
            )
        except (TooFewPairs, ValueError, OSError) as exc:
            print(f"lightning-otel reward-model train: {exc}", file=sys.stderr)
            return 1
        print(result.summary())
        if result.train_pairs == 0:
            print("FAILED: no training pair was left (all longer than --max-length?)", file=sys.stderr)
            return 1
        return 0
    if not args.api_key and not _loopback(args.host):
        print(
            f"lightning-otel reward-model serve: refusing to listen on {args.host} without --api-key "
            "(or AGL_REWARD_MODEL_API_KEY)",
            file=sys.stderr,
        )
        return 2
    import uvicorn

    from lightning_otel.collector.tcp_listener import listening_socket, server_config
    from lightning_otel.rewards.scorer import NotARewardModel, RewardModelScorer
    from lightning_otel.rewards.server import build_reward_model_app

    try:
        scorer = RewardModelScorer(args.model, max_length=args.max_length, batch_size=args.max_batch)
    except (NotARewardModel, OSError) as exc:
        print(f"lightning-otel reward-model serve: {exc}", file=sys.stderr)
        return 1
    app = build_reward_model_app(
        scorer,
        api_key=args.api_key,
        served_name=args.name,
        max_batch=args.max_batch,
        max_wait_s=args.max_wait_ms / 1000,
    )
    print(
        f"reward model {args.name or scorer.name} on http://{args.host}:{args.port} "
        "(POST /score, /score-pair, /classify; GET /healthz, /v1/models)",
        flush=True,
    )
    server = uvicorn.Server(server_config(app, log_level="warning"))
    server.run(sockets=[listening_socket(args.host, args.port)])
    return 0
