"""GSM8K-style arithmetic word problems, made offline: `python gsm8k_data.py` writes data/train.jsonl and
data/test.jsonl (`{"id", "question", "answer"}`, the answer a whole number; `--format parquet` for parquet).

    python gsm8k_data.py --train 30 --test 10 --seed 0
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NAMES = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas"]
ITEMS = ["apples", "marbles", "stickers", "books", "coins", "pencils", "cookies", "shells"]


def problem(rng: random.Random) -> tuple[str, int]:
    name, other = rng.sample(NAMES, 2)
    item = rng.choice(ITEMS)
    a, b, c = rng.randint(2, 20), rng.randint(2, 12), rng.randint(2, 5)
    kind = rng.randrange(4)
    if kind == 0:
        return f"{name} has {a} {item} and buys {b} more. How many {item} does {name} have now?", a + b
    if kind == 1:
        return f"{name} had {a + b} {item} and gave {b} to {other}. How many {item} are left?", a
    if kind == 2:
        return f"{name} fills {c} boxes with {b} {item} each. How many {item} is that in total?", b * c
    return (f"{name} has {a} {item}. {other} has {c} times as many. How many {item} do they have together?",
            a + a * c)  # fmt: skip


def make_tasks(count: int, rng: random.Random, prefix: str) -> list[dict[str, Any]]:
    tasks = []
    for index in range(count):
        question, answer = problem(rng)
        tasks.append({"id": f"{prefix}-{index}", "question": question, "answer": str(answer)})
    return tasks


def write(tasks: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        import pandas as pd

        pd.DataFrame(tasks).to_parquet(path, index=False)
    else:
        path.write_text("".join(json.dumps(task) + "\n" for task in tasks))
    return path


def prepare(directory: Path, *, train: int = 30, test: int = 10, seed: int = 0, fmt: str = "jsonl") -> list[Path]:
    rng = random.Random(seed)
    return [
        write(make_tasks(train, rng, "train"), directory / f"train.{fmt}"),
        write(make_tasks(test, rng, "test"), directory / f"test.{fmt}"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=30)
    parser.add_argument("--test", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl")
    parser.add_argument("--out", type=Path, default=HERE / "data")
    args = parser.parse_args()
    for path in prepare(args.out, train=args.train, test=args.test, seed=args.seed, fmt=args.format):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
