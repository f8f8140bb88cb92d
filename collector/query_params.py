"""What the query routes share: parsing query parameters (durations, times, trace ids, integers) with clear 400s
(`BadQuery`), and the JSON response class for large rollout payloads."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse

KIND_NAMES = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
_DURATION = re.compile(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h|d)")
_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
    "d": 86_400_000_000_000,
}


class BadQuery(ValueError):
    pass


def error_envelope(code: int, message: str) -> dict[str, Any]:
    """An error in the Jaeger query API's envelope (what every query route, and the auth check, answers)."""
    return {"data": None, "total": 0, "limit": 0, "offset": 0, "errors": [{"code": code, "msg": message}]}


class FastJSONResponse(JSONResponse):
    """orjson for the large rollout payloads (token ids). orjson writes NaN and infinities as null: every payload
    sent through here has them tagged already (`otlp_json.native_value`) or refused on input."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_NON_STR_KEYS)


def parse_duration_ns(text: str) -> int:
    """Go-style durations (`1.5s`, `200ms`, `1h30m`) and protobuf JSON durations (`1.5s`)."""
    text = text.strip()
    if not text:
        raise BadQuery("empty duration")
    position, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_NS[match.group(2)]
        position = match.end()
    if position != len(text):
        raise BadQuery(f"invalid duration {text!r} (use e.g. 250ms, 1.5s, 2m)")
    return int(total)


def parse_rfc3339_ns(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadQuery(f"invalid RFC 3339 time {text!r}") from None
    fraction = re.search(r"\.(\d+)", text)
    nanos = int(fraction.group(1)[:9].ljust(9, "0")) if fraction else 0
    return int(moment.replace(microsecond=0).timestamp()) * 1_000_000_000 + nanos


_HEX = re.compile(r"[0-9a-fA-F]+")


def trace_id_param(text: str) -> bytes:
    if not _HEX.fullmatch(text):  # bytes.fromhex alone would accept spaces
        raise BadQuery(f"trace id {text!r} is not hex")
    raw = bytes.fromhex(text)
    if len(raw) == 8:
        raw = bytes(8) + raw
    if len(raw) != 16:
        raise BadQuery(f"trace id {text!r} must be 16 or 32 hex digits")
    return raw


def int_param(request: Request, *names: str, default: int | None = None) -> int | None:
    for name in names:
        value = request.query_params.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise BadQuery(f"{name} must be an integer, got {value!r}") from None
    return default


def param(request: Request, *names: str) -> str | None:
    for name in names:
        value = request.query_params.get(name)
        if value not in (None, ""):
            return value
    return None
