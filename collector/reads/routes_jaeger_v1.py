"""Jaeger's legacy query API (`/api/services`, `/api/services/{s}/operations`, `/api/operations`, `/api/traces`,
`/api/traces/{id}`): the JSON Grafana and the classic Jaeger UI read."""

from __future__ import annotations

import json
import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lightning_otel.collector.query_params import (
    BadQuery,
    error_envelope,
    int_param,
    param,
    parse_duration_ns,
    trace_id_param,
)
from lightning_otel.collector.reads.jaeger_json import envelope, jaeger_trace
from lightning_otel.collector.reads.trace_search import find_operations, find_traces
from lightning_otel.collector.receiving.log_records import logs_by_span
from lightning_otel.collector.stores.store import SpanStore, TraceQuery


def jaeger_v1_routes(store: SpanStore) -> list[Route]:
    async def services(request: Request) -> Response:
        return JSONResponse(envelope(await store.services()))

    async def service_operations(request: Request) -> Response:
        names = sorted({name for name, _ in await store.operations(request.path_params["service"])})
        return JSONResponse(envelope(names))

    async def operations(request: Request) -> Response:
        found = await find_operations(store, param(request, "service"), param(request, "spanKind"))
        return JSONResponse(envelope(found))

    def legacy_query(request: Request) -> TraceQuery:
        tags: dict[str, str] = {}
        raw_tags = param(request, "tags")
        if raw_tags:
            try:
                parsed = json.loads(raw_tags)
            except json.JSONDecodeError:
                raise BadQuery('tags must be a JSON object, e.g. {"agl.rollout.id":"r1"}') from None
            if not isinstance(parsed, dict):
                raise BadQuery("tags must be a JSON object")
            tags.update({str(k): str(v) for k, v in parsed.items()})
        for tag in request.query_params.getlist("tag"):
            key, sep, value = tag.partition(":")
            if not sep:
                raise BadQuery(f"tag {tag!r} must be key:value")
            tags[key] = value
        end_us = int_param(request, "end")
        start_us = int_param(request, "start")
        lookback = param(request, "lookback")
        if start_us is None and lookback and lookback != "custom":
            start_us = ((end_us or time.time_ns() // 1000) * 1000 - parse_duration_ns(lookback)) // 1000
        return TraceQuery(
            service=param(request, "service"),
            operation=param(request, "operation"),
            tags=tags,
            start_ns=start_us * 1000 if start_us is not None else None,
            end_ns=end_us * 1000 if end_us is not None else None,
            min_duration_ns=parse_duration_ns(v) if (v := param(request, "minDuration")) else None,
            max_duration_ns=parse_duration_ns(v) if (v := param(request, "maxDuration")) else None,
            limit=int_param(request, "limit", default=20) or 20,
        )

    async def traces(request: Request) -> Response:
        found = await find_traces(store, legacy_query(request))
        return JSONResponse(envelope([jaeger_trace(spans) for spans in found], total=0))  # as Jaeger answers

    async def trace(request: Request) -> Response:
        spans = await store.trace_spans(trace_id_param(request.path_params["trace_id"]))
        if not spans:
            return JSONResponse(error_envelope(404, "trace not found"), status_code=404)
        logs = await logs_by_span(store, [spans[0].trace_id.hex()])  # a span's log records among its logs
        return JSONResponse(envelope([jaeger_trace(spans, logs)], total=0))

    return [
        Route("/api/services", services),
        Route("/api/services/{service}/operations", service_operations),
        Route("/api/operations", operations),
        Route("/api/traces", traces),
        Route("/api/traces/{trace_id}", trace),
    ]
