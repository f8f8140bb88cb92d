"""Rows to files, streamed: JSONL (one row a line, as made), Parquet (row groups of `BATCH_ROWS`, a fixed schema per
shape: token ids as int64 lists, messages as structs, the tools a call offered as JSON text) and a Hugging Face
`datasets` folder (`load_from_disk`), made from that Parquet file without holding it in memory.

Parquet and datasets need pyarrow and datasets (the `export` extra); JSONL needs nothing more.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Protocol

FORMATS = ("jsonl", "parquet", "hf")
BATCH_ROWS = 256  # rows per Parquet row group: what is held before a write


class RowWriter(Protocol):
    def write(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def format_of(out: str | Path, format: str | None) -> str:
    """The format asked for, else the one `out` names: `.jsonl`, `.parquet`, anything else a datasets folder."""
    if format is not None:
        if format not in FORMATS:
            raise ValueError(f"format must be one of {list(FORMATS)}, got {format!r}")
        return format
    suffix = Path(out).suffix
    return {".jsonl": "jsonl", ".parquet": "parquet"}.get(suffix, "hf")


class JsonlWriter:
    def __init__(self, path: Path) -> None:
        import orjson  # the collector extra's; imported here so that building the CLI's parser needs none of it

        self._dumps = orjson.dumps
        self._options = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY
        self._file = path.open("wb")

    def write(self, row: dict[str, Any]) -> None:
        self._file.write(self._dumps(row, option=self._options))

    def close(self) -> None:
        self._file.close()


def _schema(shape: str) -> Any:
    import pyarrow as pa

    tool_call = pa.struct(
        [("id", pa.string()), ("type", pa.string()),
         ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))]
    )  # fmt: skip
    message = pa.struct(
        [("role", pa.string()), ("content", pa.string()), ("name", pa.string()), ("tool_call_id", pa.string()),
         ("tool_calls", pa.list_(tool_call))]
    )  # fmt: skip
    messages, ids, logprobs = pa.list_(message), pa.list_(pa.int64()), pa.list_(pa.float64())
    rollout = [
        ("rollout_id", pa.string()), ("attempt_id", pa.string()), ("task_id", pa.string()),
        ("group_id", pa.string()), ("run_id", pa.string()), ("step", pa.int64()), ("mode", pa.string()),
        ("reward", pa.float64()),
    ]  # fmt: skip
    if shape == "sft":
        return pa.schema(
            [*rollout, ("call_index", pa.int64()), ("span_id", pa.string()), ("response_id", pa.string()),
             ("agent", pa.string()), ("call_reward", pa.float64()), ("policy_version", pa.int64()),
             ("messages", messages), ("tools", pa.string()), ("prompt_token_ids", ids), ("response_token_ids", ids),
             ("response_logprobs", logprobs)]
        )  # fmt: skip
    if shape == "pairs":
        return pa.schema(
            [("group_id", pa.string()), ("task_id", pa.string()), ("run_id", pa.string()), ("step", pa.int64()),
             ("agent", pa.string()), ("call_index", pa.int64()), ("prompt", messages), ("tools", pa.string()),
             ("chosen", messages),
             ("rejected", messages), ("prompt_token_ids", ids), ("chosen_token_ids", ids),
             ("rejected_token_ids", ids), ("chosen_logprobs", logprobs), ("rejected_logprobs", logprobs),
             ("chosen_reward", pa.float64()), ("rejected_reward", pa.float64()),
             ("chosen_rollout_id", pa.string()), ("rejected_rollout_id", pa.string())]
        )  # fmt: skip
    call = pa.struct(
        [("index", pa.int64()), ("span_id", pa.string()), ("response_id", pa.string()), ("agent", pa.string()),
         ("selected", pa.bool_()), ("prompt_token_ids", ids), ("response_token_ids", ids),
         ("response_logprobs", logprobs), ("input_messages", messages), ("output_message", message),
         ("tools", pa.string()), ("reward", pa.float64()), ("policy_version", pa.int64())]
    )  # fmt: skip
    return pa.schema([*rollout, ("status", pa.string()), ("policy_version", pa.int64()), ("input", pa.string()),
                      ("calls", pa.list_(call))])  # fmt: skip


def _text(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _arrow_message(message: dict[str, Any] | None) -> dict[str, Any] | None:
    """A chat message as the struct holds it: text fields as text (a tool's JSON result as JSON text)."""
    if message is None:
        return None
    return {**message, "content": _text(message.get("content")), "name": _text(message.get("name"))}


_MESSAGE_LISTS = ("messages", "prompt", "chosen", "rejected", "input_messages")


def _arrow_row(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    for key in _MESSAGE_LISTS:
        if out.get(key) is not None:
            out[key] = [_arrow_message(m) for m in out[key]]
    if "output_message" in out:
        out["output_message"] = _arrow_message(out["output_message"])
    if out.get("tools") is not None:  # tools differ in their fields: JSON text, which TRL reads as tools
        out["tools"] = json.dumps(out["tools"], ensure_ascii=False)
    if "calls" in out:
        out["calls"] = [_arrow_row(call) for call in out["calls"]]
    return out


class ParquetWriter:
    def __init__(self, path: Path, shape: str) -> None:
        import pyarrow.parquet as pq

        self._schema = _schema(shape)
        self._writer = pq.ParquetWriter(str(path), self._schema)
        self._rows: list[dict[str, Any]] = []

    def write(self, row: dict[str, Any]) -> None:
        self._rows.append(_arrow_row(row))
        if len(self._rows) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._rows:
            self._writer.write_table(pa.Table.from_pylist(self._rows, schema=self._schema))
            self._rows = []

    def close(self) -> None:
        self._flush()
        self._writer.close()


class DatasetFolderWriter:
    """A `datasets.load_from_disk` folder: rows go to a Parquet file beside it, which `datasets` turns into its
    Arrow shards (memory-mapped, not loaded) when the export ends."""

    def __init__(self, folder: Path, shape: str) -> None:
        import datasets  # noqa: F401  # fail now, not after the whole export, when it is missing

        self._folder = folder
        self._scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        self._parquet = ParquetWriter(self._scratch / "rows.parquet", shape)

    def write(self, row: dict[str, Any]) -> None:
        self._parquet.write(row)

    def close(self) -> None:
        from datasets import Dataset
        from datasets.utils import logging as datasets_logging

        self._parquet.close()
        bars = datasets_logging.is_progress_bar_enabled()
        datasets_logging.disable_progress_bar()  # ours is the export's; restored below
        try:
            parquet = str(self._scratch / "rows.parquet")
            dataset = Dataset.from_parquet(parquet, cache_dir=str(self._scratch / "cache"), keep_in_memory=False)
            dataset.save_to_disk(str(self._folder))
        finally:
            if bars:
                datasets_logging.enable_progress_bar()
            shutil.rmtree(self._scratch, ignore_errors=True)


def open_writer(out: Path, format: str, shape: str) -> RowWriter:
    out.parent.mkdir(parents=True, exist_ok=True)
    if format == "jsonl":
        return JsonlWriter(out)
    if format == "parquet":
        return ParquetWriter(out, shape)
    return DatasetFolderWriter(out, shape)
