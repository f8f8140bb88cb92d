"""Opening a store by URL: the backends are imported only when named (PostgreSQL needs the `[postgres]` extra)."""

from __future__ import annotations

from lightning_otel.collector.store import SpanStore


def open_store(url: str, **options: object) -> SpanStore:
    """`sqlite:///path/to/file.sqlite3` (add `?synchronous=full` for power-loss durability) or `postgresql://...`."""
    if url.startswith("sqlite:"):
        from lightning_otel.collector.sqlite_store import SQLiteStore

        return SQLiteStore(url, **options)  # type: ignore[arg-type]
    if url.startswith(("postgresql:", "postgres:")):
        from lightning_otel.collector.postgres_store import PostgresStore

        return PostgresStore(url, **options)  # type: ignore[arg-type]
    raise ValueError(f"unsupported store URL {url!r}: use sqlite:///path or postgresql://user@host/db")
