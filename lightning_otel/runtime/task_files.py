"""Tasks from files: what `lightning-otel train --train` and the examples read (`lightning_otel.load_tasks`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_tasks(path: str | Path) -> list[Any]:
    """Tasks from a JSONL file (one JSON value per line, blank lines skipped), a JSON list, or a parquet file (one
    task per row as a dict; needs pandas and pyarrow). Raises ValueError for an empty or unreadable file."""
    path = Path(path)
    if path.suffix == ".parquet":
        try:
            import pandas as pd
        except ImportError:
            raise ValueError(f"{path}: reading parquet needs pandas and pyarrow (pip install pandas pyarrow)") from None
        tasks: list[Any] = pd.read_parquet(path).to_dict("records")
    else:
        text = path.read_text(encoding="utf-8")
        try:
            if text.lstrip().startswith("["):
                tasks = json.loads(text)
            else:
                tasks = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON or JSONL ({exc})") from None
    if not tasks:
        raise ValueError(f"{path} holds no tasks")
    return tasks
