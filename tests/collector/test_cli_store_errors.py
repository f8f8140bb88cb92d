"""`lightning-otel export` and `ui` on a store that cannot be read (a file that is not a database, a PostgreSQL
database that does not exist, a server that is down): one line naming it, exit 2."""

from __future__ import annotations

from pathlib import Path

from tests.test_cli_input_errors import LIGHTNING, fails_with_one_line


def test_a_store_that_is_not_one_or_is_down(tmp_path: Path, postgres_cluster) -> None:
    not_a_database = tmp_path / "notes.sqlite3"
    not_a_database.write_text("these are notes\n")
    missing = postgres_cluster.url("no_such_database")  # the server is up, the database is not there
    down = "postgresql://127.0.0.1:9/agl"  # nothing listens there
    for store, said in ((not_a_database, "file is not a database"), (missing, "no_such_database"),
                        (down, "unavailable")):  # fmt: skip
        fails_with_one_line([*LIGHTNING, "export", str(store), str(tmp_path / "out.jsonl")], said)
        fails_with_one_line([*LIGHTNING, "ui", str(store), "--port", "0"], said)
