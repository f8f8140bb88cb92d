"""Opening a store by URL: the backends are imported only when named (PostgreSQL needs the `[postgres]` extra)."""

from __future__ import annotations

from pathlib import Path

from lightning_otel.collector.stores.store import SpanStore


def open_store(url: str, **options: object) -> SpanStore:
    """`sqlite:///path/to/file.sqlite3` (add `?synchronous=full` for power-loss durability) or `postgresql://...`."""
    if url.startswith("sqlite:"):
        from lightning_otel.collector.stores.sqlite_store import SQLiteStore

        return SQLiteStore(url, **options)  # type: ignore[arg-type]
    if url.startswith(("postgresql:", "postgres:")):
        from lightning_otel.collector.stores.postgres_store import PostgresStore

        return PostgresStore(url, **options)  # type: ignore[arg-type]
    raise ValueError(f"unsupported store URL {url!r}: use sqlite:///path or postgresql://user@host/db")


class NoStore(ValueError):
    """The store named does not exist."""


# A run folder's store (`lightning-otel train`'s run folders): `ui` and `export` open the folder by its name.
FOLDER_STORE = "store.sqlite3"


def existing_store_url(store: str) -> str:
    """The URL of an existing store: a path becomes sqlite:///ABSOLUTE (a run folder: its `store.sqlite3`); a SQLite
    file must exist."""
    if "://" not in store:
        path = Path(store).expanduser().resolve()
        if path.is_dir() and (path / FOLDER_STORE).is_file():
            path = path / FOLDER_STORE
        if not path.is_file():
            raise NoStore(f"no store at {path} (run the demo or a training first, or give the store's path)")
        return f"sqlite:///{path}"
    if store.startswith("sqlite:"):
        location = store.removeprefix("sqlite://").partition("?")[0]  # as the SQLite store reads it
        path = Path("/" + location.lstrip("/") if location.startswith("//") else location).expanduser()
        if not path.is_file():
            relative = Path(location.lstrip("/"))
            hint = ""
            if location.startswith("/") and relative.is_file():  # sqlite:///agl-demo/x meant ./agl-demo/x
                hint = f": sqlite:/// is followed by an absolute path; for ./{relative} give its path"
            raise NoStore(f"no store at {path}{hint}")
    return store
