"""The SQL agent for training: `LitSQLAgent` wraps the LangGraph graph of `sql_graph.py` (which knows nothing of
lightning-otel) and scores its final query by execution match against the gold query.

    python sql_agent.py          # debug the graph against $OPENAI_API_BASE (model $OPENAI_MODEL, default gpt-4.1-nano)

Tasks are Spider records: `{"db_id", "question", "query"}`; databases are read from
`$VERL_SPIDER_DATA_DIR/database/<db_id>/<db_id>.sqlite` (default `data/` beside this file).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
from spider_eval import evaluate_query, partial_credit, three_level_reward
from sql_graph import build_langgraph_sql_agent

import lightning_otel as agl

HERE = Path(__file__).resolve().parent


def spider_dir() -> Path:
    return Path(os.environ.get("VERL_SPIDER_DATA_DIR", HERE / "data"))


def database_path(data_dir: Path, db_id: str) -> Path:
    return data_dir / "database" / db_id / f"{db_id}.sqlite"


class LitSQLAgent(agl.LitAgent[dict[str, Any]]):
    """One rollout: build the graph for the task's database, answer the question, reward = execution match
    (`partial=True`: with partial credit for a query close to the gold one, `spider_eval.partial_credit`;
    `levels=True`: +1 right, 0 ran but wrong, -1 no query SQLite runs, `spider_eval.three_level_reward`)."""

    def __init__(
        self,
        max_turns: int = 3,
        truncate_length: int = 2048,
        data_dir: str | Path | None = None,
        check_last_turn: bool = True,
        *,
        partial: bool = False,
        levels: bool = False,
    ) -> None:
        if partial and levels:
            raise ValueError("choose one reward: partial (credit for a query close to the gold one) or levels")
        self.max_turns = max_turns  # a turn: write (or rewrite), execute, check
        self.partial, self.levels = partial, levels
        self.check_last_turn = check_last_turn  # False: the last turn's check, which changes nothing, is skipped
        self.truncate_length = truncate_length
        self.data_dir = Path(data_dir) if data_dir is not None else None

    def rollout(self, task: dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        llm: agl.LLM = resources["main_llm"]
        db_path = database_path(self.data_dir or spider_dir(), task["db_id"])
        agent = build_langgraph_sql_agent(
            database_path="sqlite:///" + str(db_path),
            max_turns=self.max_turns,
            truncate_length=self.truncate_length,
            openai_base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
            model=llm.model,
            sampling_parameters=llm.sampling_parameters,
            api_key=llm.api_key,
            check_last_turn=self.check_last_turn,
        )
        result = agent.invoke(
            {"question": task["question"]},
            {"callbacks": [self.tracer.get_langchain_handler()], "recursion_limit": 100},
        )
        # The gold query is only used here, after the agent answered: it never reaches a prompt.
        if self.levels:
            return three_level_reward(result["query"] or "", task["query"], db_path)
        matched = evaluate_query(result["query"], task["query"], db_path, raise_on_error=False)
        return partial_credit(result["query"], task["query"], matched) if self.partial else matched


def debug_sql_agent() -> None:
    """Run the graph on a few validation questions against a real endpoint, printing what it does."""
    data = spider_dir()
    tasks = pd.read_parquet(data / "test_dev_500.parquet").to_dict("records")[:5]
    for task in tasks:
        db_path = database_path(data, task["db_id"])
        agent = build_langgraph_sql_agent(
            database_path=str(db_path),
            openai_base_url=os.environ["OPENAI_API_BASE"],
            model=os.environ.get("OPENAI_MODEL", "gpt-4.1-nano"),
            sampling_parameters={"temperature": 0.0},
            max_turns=3,
            truncate_length=2048,
            api_key=os.environ.get("OPENAI_API_KEY", "dummy"),
        )
        state = agent.invoke({"question": task["question"]})
        reward = evaluate_query(state["query"], task["query"], db_path)
        print(f"Q: {task['question']}\n   query: {state['query']}\n   gold:  {task['query']}\n   reward {reward}")


if __name__ == "__main__":
    debug_sql_agent()
