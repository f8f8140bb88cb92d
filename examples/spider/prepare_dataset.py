"""The tutorial's data files: `train_spider.parquet`, `test_dev_500.parquet`, `test_dev.parquet` and
`database/<db_id>/<db_id>.sqlite` under the data directory (default `data/` here, or `$VERL_SPIDER_DATA_DIR`).

    python prepare_dataset.py --spider-dir ~/Downloads/spider     # convert a local Spider 1.0 download
    python prepare_dataset.py                                     # or build the offline Spider-format set

From Spider: `train_spider.json` -> train, `dev.json` -> test_dev (and 500 of it, drawn with `--seed`, ->
test_dev_500), the databases copied. Offline: `synthetic_spider.build` (six databases, a few thousand questions;
dev questions never appear in train). Records keep Spider's fields: `db_id`, `question`, `query`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd

HERE = Path(__file__).resolve().parent
FILES = ("train_spider.parquet", "test_dev_500.parquet", "test_dev.parquet")
COLUMNS = ["db_id", "question", "query"]


def default_data_dir() -> Path:
    return Path(os.environ.get("VERL_SPIDER_DATA_DIR", HERE / "data"))


def _write(out: Path, train: list[dict[str, Any]], dev: list[dict[str, Any]], seed: int) -> dict[str, int]:
    dev_500 = random.Random(seed).sample(dev, min(500, len(dev)))
    counts = {}
    for name, records in zip(FILES, (train, dev_500, dev), strict=True):
        frame = pd.DataFrame([{key: record[key] for key in COLUMNS} for record in records], columns=COLUMNS)
        frame.to_parquet(out / name, index=False)
        counts[name] = len(frame)
    return counts


def convert_spider(spider_dir: Path, out: Path, *, seed: int = 0) -> dict[str, int]:
    """A Spider 1.0 download (train_spider.json, dev.json, database/) -> the tutorial's files under `out`."""
    missing = [name for name in ("train_spider.json", "dev.json", "database") if not (spider_dir / name).exists()]
    if missing:
        raise FileNotFoundError(f"{spider_dir} is not a Spider 1.0 directory: missing {', '.join(missing)}")
    train = json.loads((spider_dir / "train_spider.json").read_text(encoding="utf-8"))
    dev = json.loads((spider_dir / "dev.json").read_text(encoding="utf-8"))
    used = {record["db_id"] for record in [*train, *dev]}
    for db_id in sorted(used):
        source = spider_dir / "database" / db_id
        if not (source / f"{db_id}.sqlite").is_file():
            raise FileNotFoundError(f"{source / (db_id + '.sqlite')} is missing (a question uses that database)")
        shutil.copytree(source, out / "database" / db_id, dirs_exist_ok=True)
    return _write(out, train, dev, seed)


def build_offline(out: Path, *, seed: int = 0) -> dict[str, int]:
    """The built-in Spider-format set (no download), written under `out`."""
    sys.path.insert(0, str(HERE))
    import synthetic_spider

    built = synthetic_spider.build(out, seed=seed)
    return _write(out, built.train, built.dev, seed)


def prepare(out: Path | None = None, *, spider_dir: Path | None = None, seed: int = 0) -> Path:
    """Write the data files (converted or built) and return the data directory."""
    out = out or default_data_dir()
    out.mkdir(parents=True, exist_ok=True)
    counts = convert_spider(spider_dir, out, seed=seed) if spider_dir else build_offline(out, seed=seed)
    source = f"Spider at {spider_dir}" if spider_dir else "the offline Spider-format generator"
    summary = ", ".join(f"{name} {count}" for name, count in counts.items())
    print(f"data from {source} in {out}: {summary}")
    return out


def data_ready(data_dir: Path) -> bool:
    return all((data_dir / name).is_file() for name in FILES) and (data_dir / "database").is_dir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spider-dir", type=Path, help="a local Spider 1.0 download to convert")
    parser.add_argument("--out", type=Path, help="the data directory (default: $VERL_SPIDER_DATA_DIR or ./data)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        prepare(args.out, spider_dir=args.spider_dir, seed=args.seed)
    except FileNotFoundError as exc:
        sys.exit(f"prepare_dataset: {exc}")


if __name__ == "__main__":
    main()
