"""Collector fixtures: a throwaway PostgreSQL cluster, a fresh store of each backend, in-process collectors."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[object]:
    """One throwaway PostgreSQL cluster per test session; each test gets its own database."""
    from lightning_otel.testing.pg_cluster import ThrowawayPostgres, find_pg_bin

    if find_pg_bin() is None:  # never a quiet skip: the README's test command installs them first
        pytest.fail("PostgreSQL server binaries missing: run `bash .ci/prerequisites` (apt-get install postgresql)")
    cluster = ThrowawayPostgres().start()
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    """A fresh, empty store of each backend (the conformance suite runs against both)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/collector.sqlite3"
    cluster = request.getfixturevalue("postgres_cluster")
    return cluster.create_database(f"t_{uuid.uuid4().hex[:12]}")  # type: ignore[attr-defined]


@pytest.fixture
async def span_store(store_url: str) -> AsyncIterator[object]:
    from lightning_otel.collector.stores.stores import open_store

    store = open_store(store_url)
    await store.start()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def start_collector(tmp_path: object) -> Iterator[object]:
    """Start in-process collectors on free loopback ports: `collector = start_collector(auth_token="t")`;
    `collector.addresses` has the URLs, `collector.run(collector.store.trace_spans(...))` queries the store."""
    from lightning_otel.collector.server import CollectorConfig, EmbeddedCollector

    running: list[EmbeddedCollector] = []

    def start(**overrides: object) -> object:
        options: dict[str, object] = {
            "http_port": 0,
            "grpc_port": 0,
            "query_port": 0,
            "store_url": f"sqlite:///{tmp_path}/collector-{len(running)}.sqlite3",
        }
        options.update(overrides)
        embedded = EmbeddedCollector(CollectorConfig(**options))  # type: ignore[arg-type]
        running.append(embedded)
        embedded.start()
        return embedded

    yield start
    for embedded in reversed(running):
        embedded.stop()
