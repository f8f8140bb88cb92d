"""The collector process: OTLP/HTTP, OTLP/gRPC and the query API in one asyncio loop over one store.

`Collector` binds its sockets in `start()` (port 0 picks a free one, so tests and an embedded trainer can run
several), reports the addresses it really listens on, and on `stop()` drains in-flight requests before closing the
store, so every acknowledged span is committed. `EmbeddedCollector` runs one in a background thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import uvicorn
from starlette.types import ASGIApp

from lightning_otel.collector.queue.rollout_state import RolloutState
from lightning_otel.collector.queue.routes_queue import EXCEPTION_HANDLERS, queue_routes
from lightning_otel.collector.reads.query_api import build_query_app
from lightning_otel.collector.reads.rollout_view import ViewSettings
from lightning_otel.collector.reads.routes_ui import UI_OPEN_PATHS, ui_routes
from lightning_otel.collector.reads.token_text import TokenText
from lightning_otel.collector.receiving.forwarder import Forwarder
from lightning_otel.collector.receiving.grpc_receiver import build_grpc_server
from lightning_otel.collector.receiving.http_receiver import build_otlp_app
from lightning_otel.collector.receiving.ingest import CollectorMetrics, Ingestor
from lightning_otel.collector.stores.sqlite_store import default_sqlite_url
from lightning_otel.collector.stores.store import SpanStore
from lightning_otel.collector.stores.stores import open_store
from lightning_otel.collector.tcp_listener import listening_socket, server_config

T = TypeVar("T")
log = logging.getLogger("lightning_otel.collector")


@dataclass(slots=True)
class CollectorConfig:
    host: str = "127.0.0.1"
    http_port: int = 4318
    grpc_port: int | None = 4317  # None: no gRPC receiver
    query_port: int = 16686
    store_url: str = field(default_factory=default_sqlite_url)
    auth_token: str | None = None
    forward_otlp: list[str] = field(default_factory=list)
    jaeger_ui_url: str | None = None
    phoenix_ui_url: str | None = None  # for the rollout view's links to the same traces
    tokenizer: str | None = None  # the policy's tokenizer (folder or tokenizer.json): /ui decodes token ids
    max_body_bytes: int = 64 * 1024 * 1024
    max_in_flight_bytes: int = 64 * 1024 * 1024
    drain_timeout_s: float = 10.0
    retention_s: float | None = None  # delete spans that ended longer ago than this (checked at start, then hourly)
    heartbeat_timeout_s: float = 30.0  # a running attempt silent this long (no heartbeat, no span) times out

    @classmethod
    def embedded(cls, **fields: Any) -> CollectorConfig:
        """A collector inside one training (the Trainer's default): loopback, free ports, no gRPC receiver, and
        `store_url` None: SQLite in a temporary folder for the run only; `fields` set any of it (the OTLP/HTTP port
        an agent service started elsewhere sends to, a store to keep)."""
        defaults: dict[str, Any] = {"host": "127.0.0.1", "http_port": 0, "grpc_port": None, "query_port": 0,
                                    "store_url": None}  # fmt: skip
        return cls(**{**defaults, **fields})


@dataclass(slots=True)
class Addresses:
    otlp_http: str
    otlp_grpc: str | None
    query: str
    store: str

    def lines(self) -> list[str]:
        return [
            f"  OTLP/HTTP  {self.otlp_http}/v1/traces",
            f"  OTLP/gRPC  {self.otlp_grpc or 'off'}",
            f"  query API  {self.query}  (Jaeger: {self.query}/api/traces, rollouts: {self.query}/v1/rollouts)",
            f"  rollouts   {self.query}/ui  (runs, steps, span trees, trained tokens, agent_match)",
            f"  store      {self.store}",
        ]


class _QuietServer(uvicorn.Server):
    """Our process owns the signal handlers (three servers share one loop), so uvicorn must not take them."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _listen(host: str, port: int) -> socket.socket:
    sock = listening_socket(host, port)
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class Collector:
    def __init__(self, config: CollectorConfig | None = None, *, store: SpanStore | None = None) -> None:
        self.config = config or CollectorConfig()
        self.store = store or open_store(self.config.store_url)
        self.metrics = CollectorMetrics()
        self.ingestor = Ingestor(self.store, max_in_flight_bytes=self.config.max_in_flight_bytes, metrics=self.metrics)
        self.rollout_state = RolloutState(self.store, heartbeat_timeout_s=self.config.heartbeat_timeout_s)
        self.ingestor.on_commit = self.rollout_state.spans_committed
        self.addresses: Addresses | None = None
        self._http_servers: list[_QuietServer] = []
        self._http_tasks: list[asyncio.Task[None]] = []
        self._grpc_server: grpc.aio.Server | None = None
        self._forwarders: list[Forwarder] = []
        self._retention_task: asyncio.Task[None] | None = None

    async def start(self) -> Addresses:
        config = self.config
        settings = ViewSettings(
            config.jaeger_ui_url,
            config.phoenix_ui_url,
            TokenText(config.tokenizer) if config.tokenizer else None,  # a wrong path fails here, not in the page
        )
        await self.store.start()
        sockets = [_listen(config.host, config.http_port), _listen(config.host, config.query_port)]
        apps: list[ASGIApp] = [
            build_otlp_app(self.ingestor, auth_token=config.auth_token, max_body_bytes=config.max_body_bytes),
            build_query_app(
                self.store,
                self.ingestor,
                auth_token=config.auth_token,
                extra_routes=[
                    *queue_routes(self.rollout_state, self._info),
                    *ui_routes(self.store, settings, auth=bool(config.auth_token)),
                ],
                extra_handlers=EXCEPTION_HANDLERS,
                open_paths=UI_OPEN_PATHS,
            ),
        ]
        for app, sock in zip(apps, sockets, strict=True):
            server = _QuietServer(
                server_config(
                    app,
                    log_level="warning",
                    access_log=False,
                    lifespan="off",
                    timeout_graceful_shutdown=config.drain_timeout_s,
                )
            )
            self._http_servers.append(server)
            self._http_tasks.append(asyncio.create_task(server.serve(sockets=[sock])))
        grpc_address = None
        if config.grpc_port is not None:
            host = f"[{config.host}]" if ":" in config.host else config.host
            self._grpc_server, grpc_port = build_grpc_server(
                self.ingestor, f"{host}:{config.grpc_port}", auth_token=config.auth_token
            )
            await self._grpc_server.start()
            grpc_address = f"{host}:{grpc_port}"
        while not all(server.started for server in self._http_servers):
            if any(task.done() for task in self._http_tasks):
                await asyncio.gather(*self._http_tasks)  # surfaces the startup error
                raise RuntimeError("an HTTP server stopped during startup")
            await asyncio.sleep(0.01)
        self.rollout_state.start()
        # Other collectors on the same database: their queue changes and span commits wake our waiters at once.
        if await self.store.listen(self._changed_elsewhere):
            self.rollout_state.recheck_s = max(self.rollout_state.recheck_s, 15.0)  # a safety net, not the signal
        if config.retention_s:
            self._retention_task = asyncio.create_task(self._enforce_retention(config.retention_s))
        for url in config.forward_otlp:
            forwarder = Forwarder(self.store, self.ingestor, url, metrics=self.metrics)
            forwarder.start()
            self._forwarders.append(forwarder)
        http_port, query_port = (sock.getsockname()[1] for sock in sockets)
        self.addresses = Addresses(
            otlp_http=_url(config.host, http_port),
            otlp_grpc=grpc_address,
            query=_url(config.host, query_port),
            store=self.store.url.split("?", 1)[0],
        )
        return self.addresses

    def _changed_elsewhere(self, topic: str) -> None:
        if topic == "queued":
            self.rollout_state.queued.notify()
        elif topic == "finished":
            self.rollout_state.ended_unseen()
        elif topic == "spans":
            self.ingestor.notify_commit()

    def _info(self) -> dict[str, Any]:
        http_port = grpc_port = None
        if self.addresses is not None:
            http_port = int(self.addresses.otlp_http.rsplit(":", 1)[1])
            grpc_port = int(self.addresses.otlp_grpc.rsplit(":", 1)[1]) if self.addresses.otlp_grpc else None
        return {"otlp_http_port": http_port, "otlp_grpc_port": grpc_port}

    async def _enforce_retention(self, retention_s: float) -> None:
        while True:
            try:
                every_s = min(retention_s / 10, 3600.0)
                deleted = await self.store.retention_pass(time.time_ns() - int(retention_s * 1e9), every_s)
                if deleted is not None:  # None: another collector on this store ran the pass
                    self.metrics.spans_deleted.inc(deleted)
            except Exception:
                log.exception("retention: deleting old spans failed; trying again later")
            await asyncio.sleep(min(retention_s / 10, 3600.0))

    async def stop(self) -> None:
        """Stop accepting, let in-flight exports finish (they are acknowledged after commit), close the store."""
        if self._retention_task is not None:
            self._retention_task.cancel()
            await asyncio.gather(self._retention_task, return_exceptions=True)
        await self.rollout_state.stop()
        for server in self._http_servers:
            server.should_exit = True
        if self._grpc_server is not None:
            await self._grpc_server.stop(grace=self.config.drain_timeout_s)
        await asyncio.gather(*self._http_tasks, return_exceptions=True)
        await asyncio.gather(*(forwarder.stop() for forwarder in self._forwarders))
        await self.store.close()


class EmbeddedCollector:
    """A collector in a background thread: `with EmbeddedCollector(config) as addresses: ...`."""

    def __init__(self, config: CollectorConfig | None = None) -> None:
        self.collector = Collector(config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agl-collector", daemon=True)

    @classmethod
    def on_sqlite_file(cls, path: str | Path, *, fresh: bool = False) -> EmbeddedCollector:
        """On loopback with free ports (OTLP/HTTP and the query API, no gRPC), storing in the SQLite file `path`:
        what demos and examples run beside their trainer. `fresh` deletes that store (and its -wal/-shm files)
        first, so a run starts with an empty store and no rollouts queued by an earlier one."""
        path = Path(path)
        if fresh:
            for stale in path.parent.glob(path.name + "*"):
                stale.unlink()
        return cls(CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=f"sqlite:///{path}"))

    def start(self) -> Addresses:
        self._thread.start()
        return self.run(self.collector.start(), timeout=60)

    @property
    def addresses(self) -> Addresses:
        assert self.collector.addresses is not None, "start() the collector first"
        return self.collector.addresses

    @property
    def store(self) -> SpanStore:
        return self.collector.store

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run `coroutine` on the collector's loop (e.g. a store query) and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=timeout)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            self.run(self.collector.stop(), timeout=60)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()

    def __enter__(self) -> Addresses:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
