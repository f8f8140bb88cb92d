"""The query HTTP API, composed from its route modules: rollout reads for the trainer (`routes_rollout_reads`),
Jaeger's legacy and v3 APIs for people and UIs (`routes_jaeger_v1`, `routes_jaeger_v3`), health and metrics
(`routes_health`), and whatever the server adds (the rollout queue); every route but `/healthz` behind the bearer
token when one is set."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lightning_otel.collector.auth import BearerAuth
from lightning_otel.collector.query_params import BadQuery, error_envelope
from lightning_otel.collector.reads.routes_health import health_routes
from lightning_otel.collector.reads.routes_jaeger_v1 import jaeger_v1_routes
from lightning_otel.collector.reads.routes_jaeger_v3 import jaeger_v3_routes
from lightning_otel.collector.reads.routes_rollout_reads import rollout_read_routes
from lightning_otel.collector.receiving.ingest import Ingestor
from lightning_otel.collector.stores.store import SpanStore, TransientStoreError


async def _bad_query(request: Request, exc: Exception) -> Response:
    return JSONResponse(error_envelope(400, str(exc)), status_code=400)


async def _store_unavailable(request: Request, exc: Exception) -> Response:
    return JSONResponse(error_envelope(503, str(exc)), status_code=503, headers={"Retry-After": "1"})


def build_query_app(
    store: SpanStore,
    ingestor: Ingestor,
    *,
    auth_token: str | None = None,
    extra_routes: Sequence[Route] = (),
    extra_handlers: Mapping[type[Exception], Any] | None = None,
    open_paths: set[str] = frozenset(),
) -> Starlette:
    routes = [
        *rollout_read_routes(store, ingestor),
        *jaeger_v1_routes(store),
        *jaeger_v3_routes(store),
        *health_routes(store, ingestor),
        *extra_routes,
    ]
    handlers = {BadQuery: _bad_query, TransientStoreError: _store_unavailable, **(extra_handlers or {})}
    auth = Middleware(BearerAuth, token=auth_token, open_paths={"/healthz", *open_paths})
    return Starlette(routes=routes, exception_handlers=handlers, middleware=[auth])
