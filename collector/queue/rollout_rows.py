"""What the queue's writes and reads share: a rollout's and an attempt's columns, their rows as the JSON the API
answers, the errors a request is refused with, and ids taken in chunks (a statement's placeholders are bounded)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

ROLLOUT_COLUMNS = (
    "rollout_id, task_id, group_id, mode, input, metadata, status, max_attempts, timeout_s, attempts, attempt_id, "
    "resources_version, reward, error, created_ns, updated_ns, end_ns, run_id, cause"
)

ROLLOUT_COLUMNS_OF_R = ", ".join(f"r.{column}" for column in ROLLOUT_COLUMNS.split(", "))

ATTEMPT_FIELDS = (
    "attempt_id",
    "number",
    "status",
    "runner_id",
    "resources_version",
    "start_ns",
    "heartbeat_ns",
    "end_ns",
    "error",
    "reward",
    "cause",
)


def rollout_json(row: Sequence[Any]) -> dict[str, Any]:
    names = ROLLOUT_COLUMNS.split(", ")
    record = dict(zip(names, row, strict=True))
    record["input"] = orjson.loads(record["input"])
    record["metadata"] = orjson.loads(record["metadata"])
    return record


def attempt_json(row: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(ATTEMPT_FIELDS, row, strict=True))


class InvalidRequest(ValueError):
    """A rollout-state request that cannot be honoured as given (HTTP 400)."""


class RunRefused(InvalidRequest):
    """A run operation that cannot be honoured as given (HTTP 400), e.g. enqueuing for a run that ended."""


class NotFound(LookupError):
    """No such rollout or resources version (HTTP 404)."""


def chunks(items: Sequence[str], size: int = 500) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


__all__ = ["ATTEMPT_FIELDS", "ROLLOUT_COLUMNS", "ROLLOUT_COLUMNS_OF_R", "InvalidRequest", "NotFound", "RunRefused",
           "attempt_json", "chunks", "rollout_json"]  # fmt: skip
