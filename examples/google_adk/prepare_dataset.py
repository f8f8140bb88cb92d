"""The ADK example's data: `data/train.parquet`, `data/test.parquet` and `data/database/<db_id>/<db_id>.sqlite`.

    python prepare_dataset.py                                   # offline: the SQL tutorial's Spider-format set
    python prepare_dataset.py --train my_train.json --test my_test.csv --database-dir my_databases/
    python prepare_dataset.py --spider-dir ~/Downloads/spider   # a local Spider 1.0 download

Records are Spider's: `db_id`, `question`, `query` (JSON list, JSONL or CSV with those columns). The offline set is
`examples/spider/synthetic_spider.py` (six SQLite databases; test questions never appear in train).
`--download` is Agent Lightning's way to fetch Spider; this machine has no network for it, so it says what to do.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parent / "spider"))  # synthetic_spider (this folder comes first)
COLUMNS = ["db_id", "question", "query"]
TEST_SIZE = 500


def read_records(path: Path) -> list[dict[str, Any]]:
    """Spider records from JSON (a list), JSONL or CSV; every record needs db_id, question and query."""
    if path.suffix == ".csv":
        records = pd.read_csv(path).to_dict("records")
    elif path.suffix == ".jsonl":
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    elif path.suffix == ".json":
        records = json.loads(path.read_text(encoding="utf-8"))
    else:
        raise ValueError(f"{path}: expected .json, .jsonl or .csv")
    for number, record in enumerate(records, 1):
        missing = [key for key in COLUMNS if not record.get(key)]
        if missing:
            raise ValueError(f"{path}: record {number} lacks {', '.join(missing)}")
    return records


def write(out: Path, train: list[dict[str, Any]], test: list[dict[str, Any]]) -> None:
    for name, records in (("train.parquet", train), ("test.parquet", test)):
        pd.DataFrame([{key: r[key] for key in COLUMNS} for r in records], columns=COLUMNS).to_parquet(out / name)
    print(f"wrote {out / 'train.parquet'} ({len(train)}) and {out / 'test.parquet'} ({len(test)})")


def copy_databases(records: list[dict[str, Any]], source: Path, out: Path) -> None:
    for db_id in sorted({record["db_id"] for record in records}):
        database = source / db_id / f"{db_id}.sqlite"
        if not database.is_file():
            raise FileNotFoundError(f"{database} is missing (a question uses database {db_id!r})")
        shutil.copytree(database.parent, out / "database" / db_id, dirs_exist_ok=True)


def prepare(out: Path, *, seed: int = 0) -> Path:
    """The offline Spider-format set under `out` (what train_adk.py builds on first use)."""
    import synthetic_spider

    out.mkdir(parents=True, exist_ok=True)
    built = synthetic_spider.build(out, seed=seed)
    write(out, built.train, random.Random(seed).sample(built.dev, min(TEST_SIZE, len(built.dev))))
    return out


def data_ready(out: Path) -> bool:
    return (out / "train.parquet").is_file() and (out / "test.parquet").is_file() and (out / "database").is_dir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outdir", type=Path, default=HERE, help="the example's directory (data/ goes under it)")
    parser.add_argument("--train", type=Path, help="your training records (JSON, JSONL or CSV)")
    parser.add_argument("--test", type=Path, help="your test records (JSON, JSONL or CSV)")
    parser.add_argument("--database-dir", type=Path, help="with --train/--test: <dir>/<db_id>/<db_id>.sqlite")
    parser.add_argument("--spider-dir", type=Path, help="a local Spider 1.0 download (train_spider.json, dev.json)")
    parser.add_argument("--download", action="store_true", help="fetch Spider from the internet (not offered here)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = args.outdir / "data"
    if args.download:
        sys.exit(
            "prepare_dataset: --download needs the internet, which this example does not use. Instead:\n"
            "  python prepare_dataset.py                        # the built-in Spider-format set, offline\n"
            "  python prepare_dataset.py --spider-dir PATH      # Spider 1.0, downloaded yourself\n"
            "  python prepare_dataset.py --train F --test F --database-dir D   # your own records"
        )
    try:
        if args.spider_dir:
            args.train, args.test = args.spider_dir / "train_spider.json", args.spider_dir / "dev.json"
            args.database_dir = args.spider_dir / "database"
        if args.train or args.test:
            if not (args.train and args.test and args.database_dir):
                sys.exit("prepare_dataset: --train, --test and --database-dir go together")
            train, test = read_records(args.train), read_records(args.test)
            out.mkdir(parents=True, exist_ok=True)
            copy_databases(train + test, args.database_dir, out)
            write(out, train, test)
        else:
            prepare(out, seed=args.seed)
    except (OSError, ValueError) as exc:
        sys.exit(f"prepare_dataset: {exc}")


if __name__ == "__main__":
    main()
