"""`/healthz` (no auth, for probes) and `/metrics` (Prometheus)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lightning_otel.collector.ingest import Ingestor
from lightning_otel.collector.store import SpanStore


def health_routes(store: SpanStore, ingestor: Ingestor) -> list[Route]:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "store": store.url.split("?", 1)[0].split("@")[-1]})

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(ingestor.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return [Route("/healthz", healthz), Route("/metrics", metrics)]
