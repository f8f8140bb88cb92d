"""The span as the trainer side reads it: one flat dict per span, as the collector's query API returns it
(`POST /v1/rollouts/spans`, `GET /v1/rollouts/{id}/spans`) and the adapters consume it. Part of the wire contract
with `semconv`: the collector client, the adapters and the dev report share this one type."""

from __future__ import annotations

from typing import Any, TypedDict


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
