"""The span as the trainer side reads it: one flat dict per span, as the collector's query API returns it
(`POST /v1/rollouts/spans`, `GET /v1/rollouts/{id}/spans`) and the adapters consume it. Part of the wire contract
with `semconv`: the collector client, the adapters and the dev report share this one type.

Attribute values are native JSON, except where JSON has no spelling: a non-finite double (NaN, +-inf, e.g. in a
logprob array) travels as `{"doubleValue": "NaN" | "Infinity" | "-Infinity"}` (the protobuf JSON mapping's names),
and a map attribute whose only key is `doubleValue` or `kvlistValue` travels wrapped as `{"kvlistValue": {...}}`, so
the two never mix. `restore_non_finite` turns a received span back into plain Python values (floats).
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_TAG_KEYS = ("doubleValue", "kvlistValue")


class Span(TypedDict, total=False):
    traceId: str  # 32 hex digits
    spanId: str  # 16 hex digits
    parentSpanId: str | None
    name: str
    kind: int  # OTLP SpanKind: 1 internal, 2 server, 3 client, ...
    startTimeUnixNano: int
    endTimeUnixNano: int
    service: str
    attributes: dict[str, Any]  # native values: token ids are lists of ints
    events: list[dict[str, Any]]
    links: list[dict[str, Any]]
    status: dict[str, Any]
    seq: int  # ingest order in the store


def non_finite_json(number: float) -> dict[str, str]:
    """The wire form of a NaN or infinite double."""
    return {"doubleValue": "NaN" if number != number else ("Infinity" if number > 0 else "-Infinity")}


def wrap_map(mapping: dict[str, Any]) -> dict[str, Any]:
    """The wire form of a map attribute: wrapped only when it could be read as a tag."""
    if len(mapping) == 1 and next(iter(mapping)) in _TAG_KEYS:
        return {"kvlistValue": mapping}
    return mapping


def restore_non_finite(value: Any) -> Any:
    """A received value (a span, its attributes, one value) with every tag turned back into its Python value."""
    if isinstance(value, list):
        return [restore_non_finite(item) if isinstance(item, (dict, list)) else item for item in value]
    if isinstance(value, dict):
        if len(value) == 1:
            key, inner = next(iter(value.items()))
            if key == "doubleValue" and isinstance(inner, str) and inner in NON_FINITE:
                return NON_FINITE[inner]
            if key == "kvlistValue" and isinstance(inner, dict):
                return {k: restore_non_finite(v) for k, v in inner.items()}
        return {k: restore_non_finite(v) if isinstance(v, (dict, list)) else v for k, v in value.items()}
    return value
