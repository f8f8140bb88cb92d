"""Jaeger's v3 query API (`/api/v3/services`, `/api/v3/operations`, `/api/v3/traces`, `/api/v3/traces/{id}`):
OTLP/JSON in `{"result": ...}`, the API the current Jaeger UI uses."""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lightning_otel.collector.query_params import (
    int_param,
    param,
    parse_duration_ns,
    parse_rfc3339_ns,
    trace_id_param,
)
from lightning_otel.collector.reads.trace_search import find_operations, find_traces
from lightning_otel.collector.receiving.otlp_json import traces_data_json
from lightning_otel.collector.stores.store import SpanStore, TraceQuery


def jaeger_v3_routes(store: SpanStore) -> list[Route]:
    async def v3_services(request: Request) -> Response:
        return JSONResponse({"services": await store.services()})

    async def v3_operations(request: Request) -> Response:
        # `param` reads an empty value as absent: an empty span_kind lists every kind, as in v1
        found = await find_operations(store, param(request, "service"), param(request, "span_kind", "spanKind"))
        return JSONResponse({"operations": found})

    def v3_query(request: Request) -> TraceQuery:
        tags = {}
        for key, value in request.query_params.multi_items():
            match = re.fullmatch(r"query\.attributes\[(.+)\]|query\.attributes\.(.+)", key)
            if match:
                tags[match.group(1) or match.group(2)] = value
        start = param(request, "query.start_time_min", "query.startTimeMin")
        end = param(request, "query.start_time_max", "query.startTimeMax")
        duration_min = param(request, "query.duration_min", "query.durationMin")
        duration_max = param(request, "query.duration_max", "query.durationMax")
        return TraceQuery(
            service=param(request, "query.service_name", "query.serviceName"),
            operation=param(request, "query.operation_name", "query.operationName"),
            tags=tags,
            start_ns=parse_rfc3339_ns(start) if start else None,
            end_ns=parse_rfc3339_ns(end) if end else None,
            min_duration_ns=parse_duration_ns(duration_min) if duration_min else None,
            max_duration_ns=parse_duration_ns(duration_max) if duration_max else None,
            limit=int_param(request, "query.search_depth", "query.searchDepth", "query.num_traces", default=20) or 20,
        )

    async def v3_traces(request: Request) -> Response:
        found = await find_traces(store, v3_query(request))
        if not found:
            return _v3_not_found("no traces found")
        return JSONResponse({"result": traces_data_json(span for spans in found for span in spans)})

    async def v3_trace(request: Request) -> Response:
        spans = await store.trace_spans(trace_id_param(request.path_params["trace_id"]))
        if not spans:
            return _v3_not_found("trace not found")
        return JSONResponse({"result": traces_data_json(spans)})

    return [
        Route("/api/v3/services", v3_services),
        Route("/api/v3/operations", v3_operations),
        Route("/api/v3/traces", v3_traces),
        Route("/api/v3/traces/{trace_id}", v3_trace),
    ]


def _v3_not_found(message: str) -> Response:
    return JSONResponse(
        {"error": {"grpcCode": 5, "httpCode": 404, "message": message, "httpStatus": "Not Found"}},
        status_code=404,
    )
