"""The SQL agent with a record of each answer: its final query and the outcome (right, no query, refused by SQLite,
other rows), one JSON line an attempt (its rollout and attempt named: an attempt stopped and run again wrote one
too), for figures that say why a policy misses, not only how often."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from spider_eval import evaluate_query
from sql_agent import LitSQLAgent, database_path
from sql_graph import build_langgraph_sql_agent

import lightning_otel as agl

OUTCOMES = ("right", "no query", "refused", "other rows")
LEVELS = {"right": 1.0, "other rows": 0.0, "refused": -1.0, "no query": -1.0}  # spider_eval.three_level_reward's


def outcome(query: str, gold: str, db: Path) -> str:
    """right, no query, refused (SQLite raised) or other rows."""
    if not query.strip():
        return "no query"
    if evaluate_query(query, gold, db, raise_on_error=False):
        return "right"
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
            connection.execute(query).fetchmany(1)
    except sqlite3.Error:
        return "refused"
    return "other rows"


class RecordingSQLAgent(LitSQLAgent):
    """The example's agent with one write turn (its CPU profile; `turns` > 1: the tutorial's write, execute, check,
    rewrite loop, the last turn not checked), each final query and its outcome appended to the task's `record_file`,
    or to `record_file` here when the task names none; reward 1 when the outcome is right (`levels=True`: +1 right,
    0 other rows, -1 refused or no query)."""

    def __init__(
        self,
        data_dir: Path,
        record_file: Path | None = None,
        *,
        truncate_length: int = 256,
        levels: bool = False,
        turns: int = 1,
    ) -> None:
        super().__init__(max_turns=turns, truncate_length=truncate_length, data_dir=data_dir, check_last_turn=False,
                         levels=levels)  # fmt: skip
        self.record_file = record_file

    def rollout(self, task: dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        llm: agl.LLM = resources["main_llm"]
        db = database_path(self.data_dir, task["db_id"])
        agent = build_langgraph_sql_agent(
            database_path=f"sqlite:///{db}", max_turns=self.max_turns, truncate_length=self.truncate_length,
            check_last_turn=False, openai_base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
            model=llm.model, sampling_parameters=llm.sampling_parameters, api_key=llm.api_key,
        )  # fmt: skip
        query = str(agent.invoke({"question": task["question"]}, {"recursion_limit": 20}).get("query") or "")
        result = outcome(query, task["query"], db)
        record_file = task.get("record_file") or self.record_file
        if record_file:
            with open(record_file, "a") as out:
                out.write(json.dumps({"question": task["question"], "query": query[:300], "outcome": result,
                                      "rollout_id": rollout.rollout_id,
                                      "attempt_id": rollout.attempt.attempt_id}) + "\n")  # fmt: skip
        return LEVELS[result] if self.levels else float(result == "right")
