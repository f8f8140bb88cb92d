"""`lightning-otel export SOURCE OUT`: a store's rollouts as a training dataset (`lightning_otel.export_dataset`).

    lightning-otel export agl-demo/collector.sqlite3 sft.jsonl                        # the selected calls, as chat
    lightning-otel export agl-demo/collector.sqlite3 pairs.parquet --shape pairs      # DPO pairs (best vs worst)
    lightning-otel export http://127.0.0.1:16686 rollouts-ds --shape rollouts --format hf --run RUN_ID
    lightning-otel export agl-demo/collector.sqlite3 trajectories.jsonl --shape atif  # ATIF v1.7, a rollout a line

SOURCE is a store (a SQLite file's path, sqlite:///ABSOLUTE/PATH, postgresql://...) or a running collector's URL.
It exits 1 when no row was written (the summary says what was left out and why) and 2 on an argument or source
error.
"""

from __future__ import annotations

import argparse
import os
import sys

from lightning_otel.export.rollouts import AGENT_MATCH_OF_RUN
from lightning_otel.export.shapes import SHAPES, PairRule
from lightning_otel.export.writers import FORMATS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a store (SQLite path, sqlite:///ABSOLUTE/PATH, postgresql://...) or a URL")
    parser.add_argument("out", help="the file (.jsonl, .parquet) or folder (a datasets folder) to write")
    parser.add_argument("--shape", choices=SHAPES, default="sft",
                        help="sft: a row per selected call; pairs: DPO pairs; rollouts: a row per rollout; "
                             "atif: an ATIF trajectory per rollout (.jsonl)")  # fmt: skip
    parser.add_argument("--format", choices=FORMATS, help="default: from OUT's suffix (a folder: hf)")
    parser.add_argument("--run", dest="run_id", help="only this run's rollouts (the run id /ui shows)")
    parser.add_argument("--step", type=int, help="only this training step's rollouts")
    parser.add_argument("--mode", choices=("train", "val", "dev"), help="only rollouts of this mode")
    parser.add_argument("--status", default="succeeded",
                        help="rollouts of this queue status (default succeeded; 'any' for all)")  # fmt: skip
    parser.add_argument("--min-reward", type=float,
                        help="sft/rollouts: the least rollout reward; pairs: the least chosen reward")  # fmt: skip
    matching = parser.add_mutually_exclusive_group()
    matching.add_argument("--agent-match", help="which agents' calls are selected (default: the run's own)")
    matching.add_argument("--all-calls", action="store_true", help="select every LLM call")
    parser.add_argument("--pairs", dest="pair_strategy", choices=("best-worst", "all"), default="best-worst",
                        help="best-worst: one pair per group; all: every two apart by more than --margin")  # fmt: skip
    parser.add_argument("--margin", type=float, default=0.0, help="the least reward gap of a pair (default 0)")
    parser.add_argument("--overwrite", action="store_true", help="replace OUT when it exists")
    parser.add_argument("--auth-token", help="the collector's bearer token (default $AGL_COLLECTOR_AUTH_TOKEN)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: every `lightning-otel` command builds this parser, runners in small environments too.
    from lightning_otel.collector.client import CollectorError
    from lightning_otel.collector.stores.store import TransientStoreError
    from lightning_otel.collector.stores.stores import NoStore
    from lightning_otel.export.dataset_export import export_dataset

    agent_match = None if args.all_calls else (args.agent_match or AGENT_MATCH_OF_RUN)
    try:
        report = export_dataset(
            args.source,
            args.out,
            shape=args.shape,
            format=args.format,
            run_id=args.run_id,
            step=args.step,
            mode=args.mode,
            status=None if args.status == "any" else args.status,
            min_reward=args.min_reward,
            agent_match=agent_match,
            pair_rule=PairRule(args.pair_strategy, args.margin),
            auth_token=args.auth_token or os.environ.get("AGL_COLLECTOR_AUTH_TOKEN"),
            overwrite=args.overwrite,
            progress=not args.no_progress,
        )
    except (NoStore, FileExistsError, ValueError, CollectorError, OSError, ImportError, TransientStoreError) as exc:
        print(f"lightning-otel export: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    if report.rows == 0:
        print("lightning-otel export: no row was written (see above for what was left out)", file=sys.stderr)
        return 1
    return 0
