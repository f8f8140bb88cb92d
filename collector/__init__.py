"""agl-otel-collector: the durable OTLP collector (receivers, stores, query APIs, forwarding) and its client.

The daemon needs the `[collector]` extra (`[postgres]` for PostgreSQL); `Client` / `AsyncClient` need only httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning_otel.collector.client import AsyncClient, Client, CollectorError
    from lightning_otel.collector.server import Collector, CollectorConfig, EmbeddedCollector

__all__ = ["AsyncClient", "Client", "Collector", "CollectorConfig", "CollectorError", "EmbeddedCollector"]


def __getattr__(name: str) -> Any:
    # Lazy: importing the package must not require the collector's optional dependencies.
    if name in ("AsyncClient", "Client", "CollectorError"):
        from lightning_otel.collector import client

        return getattr(client, name)
    if name in ("Collector", "CollectorConfig", "EmbeddedCollector"):
        from lightning_otel.collector import server

        return getattr(server, name)
    raise AttributeError(f"module 'lightning_otel.collector' has no attribute {name!r}")
