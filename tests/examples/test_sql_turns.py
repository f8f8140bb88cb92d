"""The SmolLM2 SQL example's `--turns`: the tutorial's write, execute, check, rewrite loop, the SQLite error of the
first query in the rewrite's prompt, the last query's outcome recorded; one turn (the CPU profile) ends at the write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pandas", reason="the parquet files need pandas (the [verl] extra; not in the openai3 lane)")
from prepare_dataset import prepare
from recorded_sql_agent import RecordingSQLAgent

import lightning_otel as agl
from lightning_otel.testing import OpenAITestServer

WRONG = "SELECT total FROM no_such_table"


def scripted(gold: str) -> Any:
    """Writes a query SQLite refuses, finds it wrong, rewrites it as the gold query, then finds that right."""

    def reply(body: dict[str, Any]) -> str:
        system = body["messages"][0]["content"]
        if "Double check" in system:
            return "THE QUERY IS CORRECT." if gold in body["messages"][-1]["content"] else "THE QUERY IS INCORRECT."
        return f"```sqlite\n{gold if 'Rewrite the previous' in system else WRONG}\n```"

    return reply


@pytest.mark.parametrize(("turns", "outcome", "calls"), [(3, "right", 4), (1, "refused", 1)])
def test_the_rewrite_reads_the_first_querys_error_and_its_query_is_the_one_scored(
    tmp_path: Path, turns: int, outcome: str, calls: int
) -> None:
    data = tmp_path / "data"
    prepare(data)
    task = agl.load_tasks(data / "train_spider.parquet")[0]
    records = tmp_path / "records.jsonl"
    with OpenAITestServer(replies=scripted(task["query"])) as server:
        llm = agl.LLM(server.base_url, "agl-policy", sampling_parameters={"temperature": 0.0, "max_tokens": 64})
        trainer = agl.Trainer(n_runners=1, adapter={"agent_match": "write"}, initial_resources={"main_llm": llm})
        trainer.dev(RecordingSQLAgent(data, records, turns=turns), val_dataset=[task], print_spans=False)
        prompts = [request.body["messages"] for request in server.requests if "messages" in request.body]
    (record,) = [json.loads(line) for line in records.read_text().splitlines()]
    assert record["outcome"] == outcome
    assert len(prompts) == calls  # 3 turns: write, check, rewrite, check (right: no third turn)
    if turns > 1:
        rewrite = prompts[2][-1]["content"]
        assert WRONG in rewrite and "Error: no such table: no_such_table" in rewrite  # the error reached the rewrite
