"""agl-otel-collector: the durable OTLP collector (receivers, stores, query APIs, forwarding) and its client.

The daemon needs the `[collector]` extra; `Client` / `AsyncClient` need only httpx.
"""

from lightning_otel.collector.client import AsyncClient, Client, CollectorError

__all__ = ["AsyncClient", "Client", "CollectorError"]
