"""`/healthz` (no auth, for probes) and `/metrics` (Prometheus).

`/healthz` is 200 `{"status": "ok"}` only when the store's writer answered a probe just now (it takes the write
lock, or runs a query, through the same queue exports use); otherwise 503 `{"status": "unavailable", "problem"}`.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lightning_otel.collector.receiving.ingest import Ingestor
from lightning_otel.collector.stores.store import SpanStore


def health_routes(store: SpanStore, ingestor: Ingestor) -> list[Route]:
    async def healthz(request: Request) -> Response:
        where = store.url.split("?", 1)[0].split("@")[-1]
        problem = await store.problem()
        if problem is not None:
            return JSONResponse({"status": "unavailable", "store": where, "problem": problem}, status_code=503)
        return JSONResponse({"status": "ok", "store": where})

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(ingestor.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return [Route("/healthz", healthz), Route("/metrics", metrics)]
