"""The spider example's graph (examples/spider/sql_graph.py) runs its SQL for real: write -> execute -> check ->
rewrite until the check passes or max_turns; each node is an agent in the traces."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

import lightning_otel
from lightning_otel.testing import OpenAITestServer, SpanCapture

SPIDER = Path(__file__).resolve().parents[3] / "examples" / "spider"
sys.path.insert(0, str(SPIDER))
from sql_graph import CORRECT, INCORRECT, build_langgraph_sql_agent, parse_query, run_query, table_info  # noqa: E402


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "music.sqlite"
    with sqlite3.connect(path) as connection:
        connection.executescript(
            """
            CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT);
            INSERT INTO singer VALUES (1, 'Ann', 'France'), (2, 'Bo', 'Japan'), (3, 'Cy', 'France');
            """
        )
    connection.close()
    return path


def graph(server: OpenAITestServer, db: Path, max_turns: int = 3, truncate_length: int = 2048, **options):
    return build_langgraph_sql_agent(
        database_path="sqlite:///" + str(db),
        openai_base_url=server.base_url,
        model="agl-tiny",
        sampling_parameters={"temperature": 0.0, "max_tokens": 64},
        max_turns=max_turns,
        truncate_length=truncate_length,
        **options,
    )


def prompts_of(server: OpenAITestServer) -> list[str]:
    return [request.body["messages"][-1]["content"] for request in server.requests]


def test_a_failing_query_is_executed_checked_and_rewritten(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture, db: Path
) -> None:
    openai_test_server.set_replies([
        "```sqlite\nSELECT nme FROM singer WHERE country = 'France'\n```",
        f"The column nme does not exist. {INCORRECT}",
        "```sqlite\nSELECT name FROM singer WHERE country = 'France'\n```",
        f"Looks right. {CORRECT}",
    ])  # fmt: skip
    with lightning_otel.rollout_context("ro-spider", "at-1"):
        state = graph(openai_test_server, db).invoke({"question": "Which singers are from France?"})
    assert state["query"] == "SELECT name FROM singer WHERE country = 'France'"
    assert state["num_turns"] == 2
    check_prompts = [prompt for prompt in prompts_of(openai_test_server) if "Execution result:" in prompt]
    assert "Error: no such column: nme" in check_prompts[0]  # the real SQLite error reached the checker
    assert "[('Ann',), ('Cy',)]" in check_prompts[-1]  # and then the real rows
    agents = [s.attributes.get("gen_ai.agent.name") for s in agl_spans.llm_spans()]
    assert agents == ["write_query", "check_query", "rewrite_query", "check_query"]
    assert {s.attributes.get("agl.rollout.id") for s in agl_spans.spans} == {"ro-spider"}


def test_the_loop_stops_after_max_turns(openai_test_server: OpenAITestServer, db: Path) -> None:
    openai_test_server.set_replies(lambda body: "SELECT nothing" if "Double check" not in str(body) else INCORRECT)
    state = graph(openai_test_server, db, max_turns=2).invoke({"question": "Which singers are from France?"})
    assert state["num_turns"] == 2
    assert len(openai_test_server.requests) == 4  # write, check, rewrite, check


def test_without_the_last_check_the_last_turn_ends_after_execution(
    openai_test_server: OpenAITestServer, db: Path
) -> None:
    openai_test_server.set_replies(lambda body: "SELECT nothing" if "Double check" not in str(body) else INCORRECT)
    state = graph(openai_test_server, db, max_turns=2, check_last_turn=False).invoke({"question": "Which singers?"})
    assert state["num_turns"] == 2 and state["execution"].startswith("Error:")  # executed all the same
    assert len(openai_test_server.requests) == 3  # write, check, rewrite: the second check could change nothing
    openai_test_server.requests.clear()
    graph(openai_test_server, db, max_turns=1, check_last_turn=False).invoke({"question": "Which singers?"})
    assert len(openai_test_server.requests) == 1  # one turn: write and execute only


def test_results_are_truncated_and_the_schema_shows_tables_and_rows(db: Path) -> None:
    assert run_query("SELECT name FROM singer", db, truncate_length=10) == "[('Ann',), ... (truncated)"
    assert run_query("DELETE FROM singer", db, 100).startswith("Error: not a SELECT statement")
    info = table_info(db)
    assert "CREATE TABLE singer" in info and "3 rows from singer table:" in info and "Ann\tFrance" in info


def test_the_query_is_the_last_fenced_block_or_the_whole_reply() -> None:
    assert parse_query("Try:\n```sql\nSELECT 1\n```\nor\n```sqlite\nSELECT 2\n```") == "SELECT 2"
    assert parse_query("  SELECT 3  ") == "SELECT 3"
