"""Tasks from files: what `lightning-otel train --train` and the examples read (`lightning_otel.load_tasks`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_tasks(path: str | Path) -> list[Any]:
    """Tasks from a JSONL file (one JSON object per line, blank lines skipped), a JSON list of objects, a parquet
    file (one task per row as a dict; needs pandas and pyarrow), or a Hugging Face `datasets` directory written by
    `save_to_disk` (a `DatasetDict` with one split, or the split's own directory). Raises ValueError, naming the
    file (and the line), for an empty or unreadable one or a task that is not an object."""
    path = Path(path)
    if path.is_dir():
        tasks = _hf_dataset(path)
    elif path.suffix == ".parquet":
        try:
            import pandas as pd
        except ImportError:
            raise ValueError(f"{path}: reading parquet needs pandas and pyarrow (pip install pandas pyarrow)") from None
        tasks: list[Any] = pd.read_parquet(path).to_dict("records")
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            line = path.read_bytes()[: exc.start].count(b"\n") + 1
            raise ValueError(f"{path}: not UTF-8 text (line {line}: {exc.reason})") from None
        if text.lstrip().startswith("["):
            try:
                tasks = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: not a JSON list ({exc})") from None
            for number, task in enumerate(tasks, 1):
                if not isinstance(task, dict):
                    raise ValueError(f"{path}: item {number} is {_kind(task)}, not an object: each task is a JSON "
                                     "object")  # fmt: skip
        else:
            tasks = [_jsonl_line(path, number, line) for number, line in enumerate(text.splitlines(), 1)]
            tasks = [task for task in tasks if task is not _BLANK]
    if not tasks:
        raise ValueError(f"{path} holds no tasks")
    return tasks


_BLANK = object()


def _jsonl_line(path: Path, number: int, line: str) -> Any:
    if not line.strip():
        return _BLANK
    try:
        task = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON or JSONL (line {number}: {exc.msg} at column {exc.colno})") from None
    if not isinstance(task, dict):
        raise ValueError(f"{path}: line {number} is {_kind(task)}, not an object: each line is one task, a JSON object")
    return task


def _kind(value: Any) -> str:
    return {str: "a string", list: "a list", bool: "a boolean", type(None): "null"}.get(type(value), "a number")


def _hf_dataset(path: Path) -> list[Any]:
    try:
        import datasets
    except ImportError:
        raise ValueError(f"{path}: a directory is read as a Hugging Face dataset, which needs `datasets`") from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError as exc:
        raise ValueError(f"{path}: not a dataset saved with save_to_disk ({exc})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if len(loaded) != 1:
            splits = ", ".join(f"{path / name}" for name in loaded)
            raise ValueError(f"{path} holds the splits {list(loaded)}: give one split's directory ({splits})")
        (loaded,) = loaded.values()
    return loaded.to_list()
