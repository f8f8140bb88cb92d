"""`lightning-otel ui STORE`: the rollout view over a store any run left (a demo's, an example's, a training's).

    lightning-otel ui agl-demo/collector.sqlite3 --tokenizer agl-demo/model     # then open http://127.0.0.1:16687/ui
    lightning-otel ui runs/capitals-20261204-153012          # a run folder: its store, its model's tokenizer
    lightning-otel ui postgresql://user@db/traces --port 16700

STORE is a run folder (`lightning-otel train`'s: its store.sqlite3, and its model's tokenizer unless --tokenizer), a
SQLite file's path or a store URL (`sqlite:///...`, `postgresql://...`). It is read, never created: a
path with no store behind it is an error that says so (a `sqlite:///` URL followed by a relative path names an
absolute file: `sqlite:///agl-demo/x` is `/agl-demo/x`). The view is served by a collector on loopback; its OTLP
receiver listens on a free port, so a run still writing to the same store is not disturbed.
"""

from __future__ import annotations

import argparse
import sys
import time

from lightning_otel.collector.stores.stores import NoStore, existing_store_url
from lightning_otel.collector.tcp_listener import port_number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("store", help="a run folder, a SQLite file's path, sqlite:///ABSOLUTE/PATH or postgresql://...")
    parser.add_argument("--port", type=port_number, default=16687, help="the view's port (default 16687)")
    parser.add_argument("--host", default="127.0.0.1", help="where to listen (default loopback)")
    parser.add_argument("--tokenizer", help="the policy's tokenizer folder: token ids are shown as text")


def run_folder_tokenizer(store: str) -> str | None:
    """A run folder's tokenizer: its trained model's, else the model it started from (its settings.json)."""
    import json
    from pathlib import Path

    folder = Path(store)
    if not folder.is_dir():
        return None
    if (folder / "model" / "tokenizer.json").is_file():
        return str(folder / "model")
    try:
        model = json.loads((folder / "settings.json").read_text(encoding="utf-8")).get("model_folder")
    except (OSError, ValueError):
        return None
    return model if model and (Path(model) / "tokenizer.json").is_file() else None


def run(args: argparse.Namespace) -> int:
    from lightning_otel.collector.client import Client
    from lightning_otel.collector.server import CollectorConfig, EmbeddedCollector
    from lightning_otel.collector.stores.store import TransientStoreError

    try:
        url = existing_store_url(args.store)
        config = CollectorConfig(host=args.host, http_port=0, grpc_port=None, query_port=args.port, store_url=url,
                                 tokenizer=args.tokenizer or run_folder_tokenizer(args.store))  # fmt: skip
        collector = EmbeddedCollector(config)
        addresses = collector.start()
    except (NoStore, OSError, ValueError, TransientStoreError) as exc:  # a store down, missing, or not a store
        print(f"lightning-otel ui: {exc}", file=sys.stderr)
        return 2
    try:
        with Client(addresses.query) as client:
            stats = client.queue_stats()
        rollouts = sum(int(count) for count in stats.values())
        where = getattr(collector.store, "path", addresses.store)  # a SQLite store's file as it resolved it
        print(f"rollout view: {addresses.query}/ui  ({rollouts} rollouts in {where}; Ctrl-C stops)", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        collector.stop()
