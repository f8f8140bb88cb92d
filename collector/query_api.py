"""Query HTTP API: rollout reads for the trainer, Jaeger's legacy and v3 APIs for people and UIs.

- `GET /v1/rollouts` and `GET /v1/rollouts/{id}/spans` (`attempt_id`, `latest`, `format=flat|otlp`, and
  `min_spans` + `timeout` to wait, event-driven, until that many spans are committed);
  `POST /v1/rollouts/spans` with `{"rollouts": [{"rollout_id": ...}, ...]}`: a training batch in one call.
- Legacy Jaeger (`/api/services`, `/api/services/{s}/operations`, `/api/operations`, `/api/traces`,
  `/api/traces/{id}`): the JSON Grafana and the classic UI read.
- Jaeger v3 (`/api/v3/services`, `/api/v3/operations`, `/api/v3/traces`, `/api/v3/traces/{id}`): OTLP/JSON in
  `{"result": ...}`, the API the current Jaeger UI uses.
- `/healthz` (no auth, for probes) and `/metrics` (Prometheus).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from lightning_otel.collector.http_receiver import bearer_ok
from lightning_otel.collector.ingest import Ingestor
from lightning_otel.collector.jaeger_json import envelope, error_envelope, jaeger_trace, span_matches_tags
from lightning_otel.collector.otlp_json import flat_span, traces_data_json
from lightning_otel.collector.store import SpanStore, TraceQuery, TransientStoreError

_KIND_NAMES = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
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


class FastJSONResponse(JSONResponse):
    """orjson for the large rollout payloads (token ids); NaN and infinities become null."""

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


def _trace_id(text: str) -> bytes:
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise BadQuery(f"trace id {text!r} is not hex") from None
    if len(raw) == 8:
        raw = bytes(8) + raw
    if len(raw) != 16:
        raise BadQuery(f"trace id {text!r} must be 16 or 32 hex digits")
    return raw


def _int_param(request: Request, *names: str, default: int | None = None) -> int | None:
    for name in names:
        value = request.query_params.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise BadQuery(f"{name} must be an integer, got {value!r}") from None
    return default


def _param(request: Request, *names: str) -> str | None:
    for name in names:
        value = request.query_params.get(name)
        if value not in (None, ""):
            return value
    return None


def build_query_app(
    store: SpanStore,
    ingestor: Ingestor,
    *,
    auth_token: str | None = None,
    extra_routes: Sequence[Route] = (),
    extra_handlers: Mapping[type[Exception], Any] | None = None,
) -> Starlette:
    async def find_traces(query: TraceQuery) -> list[list]:
        if not query.tags:
            trace_ids = await store.find_trace_ids(query)
        else:
            trace_ids, seen = [], set()
            for stored in await store.candidate_spans(query, limit=max(query.limit * 50, 1000)):
                if stored.trace_id not in seen and span_matches_tags(stored, query.tags):
                    seen.add(stored.trace_id)
                    trace_ids.append(stored.trace_id)
                    if len(trace_ids) >= query.limit:
                        break
        traces = await asyncio.gather(*(store.trace_spans(trace_id) for trace_id in trace_ids))
        return [spans for spans in traces if spans]

    # --- trainer -----------------------------------------------------------------------------------------------
    async def rollouts(request: Request) -> Response:
        limit = _int_param(request, "limit", default=100) or 100
        summaries = await store.rollouts(limit=limit, since_ns=_int_param(request, "since_ns"))
        return JSONResponse(
            {
                "rollouts": [
                    {
                        "rollout_id": s.rollout_id,
                        "span_count": s.span_count,
                        "start_time_unix_nano": s.start_ns,
                        "end_time_unix_nano": s.end_ns,
                        "agents": s.agents,
                        "attempts": s.attempts,
                    }
                    for s in summaries
                ]
            }
        )

    async def rollout_spans(request: Request) -> Response:
        rollout_id = request.path_params["rollout_id"]
        attempt_id = _param(request, "attempt_id")
        if request.query_params.get("latest") in ("1", "true"):
            attempt_id = "latest"
        min_spans = _int_param(request, "min_spans", default=0) or 0
        timeout_s = float(request.query_params.get("timeout", "0") or 0)
        deadline = time.monotonic() + min(timeout_s, 300.0)
        generation = ingestor.commit_generation
        spans = await store.rollout_spans(rollout_id, attempt_id)
        while len(spans) < min_spans and time.monotonic() < deadline:
            await ingestor.wait_for_commit(deadline - time.monotonic(), after=generation)
            generation = ingestor.commit_generation
            spans = await store.rollout_spans(rollout_id, attempt_id)
        if request.query_params.get("format") == "otlp":
            return FastJSONResponse({"rollout_id": rollout_id, **traces_data_json(spans)})
        return FastJSONResponse({"rollout_id": rollout_id, "spans": [flat_span(s) for s in spans]})

    async def many_rollout_spans(request: Request) -> Response:
        try:
            body = await request.json()
            wanted = body["rollouts"]
            if not isinstance(wanted, list) or not all(isinstance(w, dict) and "rollout_id" in w for w in wanted):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise BadQuery(
                'body must be {"rollouts": [{"rollout_id": "...", "attempt_id"?: "...", "latest"?: true}, ...]}'
            ) from None
        if len(wanted) > 10_000:
            raise BadQuery("at most 10000 rollouts per request")
        found = await asyncio.gather(
            *(
                store.rollout_spans(str(w["rollout_id"]), "latest" if w.get("latest") else w.get("attempt_id"))
                for w in wanted
            )
        )
        return JSONResponse(
            {
                "rollouts": {
                    str(w["rollout_id"]): [flat_span(s) for s in spans] for w, spans in zip(wanted, found, strict=True)
                }
            }
        )

    # --- Jaeger legacy -----------------------------------------------------------------------------------------
    async def services(request: Request) -> Response:
        return JSONResponse(envelope(await store.services()))

    async def service_operations(request: Request) -> Response:
        names = sorted({name for name, _ in await store.operations(request.path_params["service"])})
        return JSONResponse(envelope(names))

    async def operations(request: Request) -> Response:
        kind = _param(request, "spanKind")
        found = [
            {"name": name, "spanKind": _KIND_NAMES.get(k, "")}
            for name, k in await store.operations(_param(request, "service"))
        ]
        return JSONResponse(envelope([o for o in found if kind in (None, o["spanKind"])]))

    def legacy_query(request: Request) -> TraceQuery:
        tags: dict[str, str] = {}
        raw_tags = _param(request, "tags")
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
        end_us = _int_param(request, "end")
        start_us = _int_param(request, "start")
        lookback = _param(request, "lookback")
        if start_us is None and lookback and lookback != "custom":
            start_us = ((end_us or time.time_ns() // 1000) * 1000 - parse_duration_ns(lookback)) // 1000
        return TraceQuery(
            service=_param(request, "service"),
            operation=_param(request, "operation"),
            tags=tags,
            start_ns=start_us * 1000 if start_us is not None else None,
            end_ns=end_us * 1000 if end_us is not None else None,
            min_duration_ns=parse_duration_ns(v) if (v := _param(request, "minDuration")) else None,
            max_duration_ns=parse_duration_ns(v) if (v := _param(request, "maxDuration")) else None,
            limit=_int_param(request, "limit", default=20) or 20,
        )

    async def traces(request: Request) -> Response:
        found = await find_traces(legacy_query(request))
        return JSONResponse(envelope([jaeger_trace(spans) for spans in found], total=0))  # as Jaeger answers

    async def trace(request: Request) -> Response:
        spans = await store.trace_spans(_trace_id(request.path_params["trace_id"]))
        if not spans:
            return JSONResponse(error_envelope(404, "trace not found"), status_code=404)
        return JSONResponse(envelope([jaeger_trace(spans)], total=0))

    # --- Jaeger v3 ---------------------------------------------------------------------------------------------
    async def v3_services(request: Request) -> Response:
        return JSONResponse({"services": await store.services()})

    async def v3_operations(request: Request) -> Response:
        kind = _param(request, "span_kind", "spanKind")
        found = [
            {"name": name, "spanKind": _KIND_NAMES.get(k, "")}
            for name, k in await store.operations(_param(request, "service"))
        ]
        return JSONResponse({"operations": [o for o in found if kind in (None, "", o["spanKind"])]})

    def v3_query(request: Request) -> TraceQuery:
        tags = {}
        for key, value in request.query_params.multi_items():
            match = re.fullmatch(r"query\.attributes\[(.+)\]|query\.attributes\.(.+)", key)
            if match:
                tags[match.group(1) or match.group(2)] = value
        start = _param(request, "query.start_time_min", "query.startTimeMin")
        end = _param(request, "query.start_time_max", "query.startTimeMax")
        duration_min = _param(request, "query.duration_min", "query.durationMin")
        duration_max = _param(request, "query.duration_max", "query.durationMax")
        return TraceQuery(
            service=_param(request, "query.service_name", "query.serviceName"),
            operation=_param(request, "query.operation_name", "query.operationName"),
            tags=tags,
            start_ns=parse_rfc3339_ns(start) if start else None,
            end_ns=parse_rfc3339_ns(end) if end else None,
            min_duration_ns=parse_duration_ns(duration_min) if duration_min else None,
            max_duration_ns=parse_duration_ns(duration_max) if duration_max else None,
            limit=_int_param(request, "query.search_depth", "query.searchDepth", "query.num_traces", default=20) or 20,
        )

    async def v3_traces(request: Request) -> Response:
        found = await find_traces(v3_query(request))
        if not found:
            return _v3_not_found("no traces found")
        return JSONResponse({"result": traces_data_json(span for spans in found for span in spans)})

    async def v3_trace(request: Request) -> Response:
        spans = await store.trace_spans(_trace_id(request.path_params["trace_id"]))
        if not spans:
            return _v3_not_found("trace not found")
        return JSONResponse({"result": traces_data_json(spans)})

    # --- operations --------------------------------------------------------------------------------------------
    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "store": store.url.split("?", 1)[0].split("@")[-1]})

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(ingestor.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/v1/rollouts", rollouts),
        Route("/v1/rollouts/spans", many_rollout_spans, methods=["POST"]),
        Route("/v1/rollouts/{rollout_id}/spans", rollout_spans),
        Route("/api/services", services),
        Route("/api/services/{service}/operations", service_operations),
        Route("/api/operations", operations),
        Route("/api/traces", traces),
        Route("/api/traces/{trace_id}", trace),
        Route("/api/v3/services", v3_services),
        Route("/api/v3/operations", v3_operations),
        Route("/api/v3/traces", v3_traces),
        Route("/api/v3/traces/{trace_id}", v3_trace),
        Route("/healthz", healthz),
        Route("/metrics", metrics),
        *extra_routes,
    ]

    async def bad_query(request: Request, exc: Exception) -> Response:
        return JSONResponse(error_envelope(400, str(exc)), status_code=400)

    async def store_unavailable(request: Request, exc: Exception) -> Response:
        return JSONResponse(error_envelope(503, str(exc)), status_code=503, headers={"Retry-After": "1"})

    return Starlette(
        routes=routes,
        exception_handlers={BadQuery: bad_query, TransientStoreError: store_unavailable, **(extra_handlers or {})},
        middleware=[Middleware(BearerAuth, token=auth_token, open_paths={"/healthz"})],
    )


class BearerAuth:
    """ASGI middleware: every route but `open_paths` needs `Authorization: Bearer <token>` when a token is set."""

    def __init__(self, app: ASGIApp, token: str | None, open_paths: set[str]) -> None:
        self.app = app
        self.token = token
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token and scope["type"] == "http" and scope["path"] not in self.open_paths:
            header = Headers(scope=scope).get("authorization")
            if not bearer_ok(header, self.token):
                response = JSONResponse(
                    error_envelope(401, "missing or wrong bearer token"),
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _v3_not_found(message: str) -> Response:
    return JSONResponse(
        {"error": {"grpcCode": 5, "httpCode": 404, "message": message, "httpStatus": "Not Found"}},
        status_code=404,
    )
