"""What any SQL agent here needs around its model: the schema as text, the query out of a reply, a query's result.

Framework-free (the LangGraph agent of this tutorial and the ADK agent of `examples/google_adk` both use it).
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from spider_eval import QueryRejected, execute


def table_info(database_path: str | Path, sample_rows: int = 3) -> str:
    """The schema as the agent sees it: each CREATE TABLE and its first rows (LangChain's SQLDatabase format)."""
    with sqlite3.connect(f"{Path(database_path).resolve().as_uri()}?mode=ro", uri=True) as connection:
        tables = connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        parts = []
        for name, create in tables:
            cursor = connection.execute(f'SELECT * FROM "{name}" LIMIT {int(sample_rows)}')
            header = "\t".join(column[0] for column in cursor.description)
            rows = "\n".join("\t".join(str(value) for value in row) for row in cursor.fetchall())
            parts.append(f"{create}\n\n/*\n{sample_rows} rows from {name} table:\n{header}\n{rows}\n*/")
    connection.close()
    return "\n\n".join(parts)


def parse_query(text: str) -> str:
    """The last fenced code block of the reply, or the whole reply when it has none."""
    blocks = re.findall(r"```[\w-]*\n(.*?)(?:\n)?```", text, re.DOTALL)
    return (blocks[-1] if blocks else text).strip()


def run_query(query: str, database_path: str | Path, truncate_length: int) -> str:
    """The execution result the checker reads: the rows, or the error; cut to `truncate_length` characters."""
    try:
        result = str(execute(query, database_path))
    except (QueryRejected, FileNotFoundError) as exc:
        result = f"Error: {exc}"
    return result if len(result) <= truncate_length else result[:truncate_length] + " ... (truncated)"
