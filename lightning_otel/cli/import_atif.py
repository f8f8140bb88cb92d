"""`lightning-otel import FILE STORE`: ATIF trajectories into a store (`lightning_otel.export.atif_import`).

    lightning-otel import trajectories.jsonl agl-demo/collector.sqlite3       # a store, or a collector's URL
    lightning-otel import harbor/trajectory.json store.sqlite3 --tokenizer smollm2   # ids for steps without them

FILE holds one trajectory (a JSON object), a JSON array of them, or JSON Lines. It exits 2 when FILE is not ATIF or
the store cannot take it (nothing is written then), 1 when there was no trajectory to import.
"""

from __future__ import annotations

import argparse
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="ATIF trajectories: a .json object or array, or .jsonl")
    parser.add_argument("store", help="a store (SQLite path, sqlite:///ABSOLUTE/PATH, postgresql://...) or a URL")
    parser.add_argument("--auth-token", help="the collector's bearer token (default $AGL_COLLECTOR_AUTH_TOKEN)")
    parser.add_argument("--tokenizer", metavar="MODEL",
                        help="re-tokenize steps without token ids with this model's chat template (a model name: "
                             "smollm2, or a Hugging Face folder); the ids are marked as re-tokenized")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from lightning_otel.collector.client import CollectorError
    from lightning_otel.collector.stores.store import TransientStoreError
    from lightning_otel.collector.stores.stores import NoStore
    from lightning_otel.export.atif_import import import_atif

    try:
        report = import_atif(
            args.file,
            args.store,
            auth_token=args.auth_token or os.environ.get("AGL_COLLECTOR_AUTH_TOKEN"),
            tokenizer=args.tokenizer,
        )
    except (NoStore, ValueError, CollectorError, OSError, TransientStoreError, RuntimeError) as exc:
        print(f"lightning-otel import: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    if not report.rollouts:
        print("lightning-otel import: no trajectory in the file", file=sys.stderr)
        return 1
    return 0
