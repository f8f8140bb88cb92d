"""The SQL tutorial's `LitSQLAgent` (seed 001) as it writes it, with `import lightning_otel as agl` in place of
`import agentlightning as agl`. The tutorial calls its snippet pseudo-code: `build_langgraph_sql_agent` and
`evaluate_query` live in its examples folder, and `question`, `ground_truth` and `db_path` are never defined. Those
pieces are ours, marked below: a LangGraph write_query -> check_query -> rewrite_query graph over a real SQLite file,
and an execution-match evaluator."""

# ruff: noqa: UP006, UP035  (the tutorial writes typing.Dict; kept as it writes it)
from __future__ import annotations

import sqlite3
from typing import Any, Dict, TypedDict

import lightning_otel as agl  # was: import agentlightning as agl


class LitSQLAgent(agl.LitAgent[Dict[str, Any]]):
    def __init__(self, max_turns: int, truncate_length: int):
        # Each turn here is a full write/exe/check/rewrite loop
        self.max_turns = max_turns
        self.truncate_length = truncate_length

    def rollout(self, task: Dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> float | None:
        question, ground_truth, db_path = task["question"], task["query"], task["db_id"]  # ours: undefined there
        llm: agl.LLM = resources["main_llm"]
        agent = build_langgraph_sql_agent(
            database_path="sqlite:///" + task["db_id"],
            max_turns=self.max_turns,
            truncate_length=self.truncate_length,
            openai_base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
            model=llm.model,
            sampling_parameters=llm.sampling_parameters,
        )
        result = agent.invoke(
            {"question": question},
            {
                "callbacks": [self.tracer.get_langchain_handler()],
                "recursion_limit": 100,
            },
        )
        reward = evaluate_query(result["query"], ground_truth, db_path, raise_on_error=False)
        return reward


# --- ours: what the tutorial's examples folder provides ------------------------------------------------------------
class SQLState(TypedDict, total=False):
    question: str
    query: str
    result: str
    feedback: str
    turns: int


def _run(db_path: str, query: str, truncate_length: int) -> str:
    try:
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as connection:
            return str(connection.execute(query).fetchall())[:truncate_length]
    except sqlite3.Error as exc:
        return f"Error: {exc}"[:truncate_length]


def build_langgraph_sql_agent(
    *,
    database_path: str,
    max_turns: int,
    truncate_length: int,
    openai_base_url: str,
    model: str,
    sampling_parameters: Dict[str, Any],
) -> Any:
    """write_query -> (execute) -> check_query -> rewrite_query, until the check says the query is correct."""
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph

    db_path = database_path.removeprefix("sqlite:///")
    llm = ChatOpenAI(model=model, base_url=openai_base_url, api_key="unused", max_retries=2, **sampling_parameters)

    def write_query(state: SQLState) -> SQLState:
        query = str(llm.invoke(f"Write one SQLite query for: {state['question']}").content).strip()
        return {"query": query, "result": _run(db_path, query, truncate_length), "turns": 1}

    def check_query(state: SQLState) -> SQLState:
        prompt = f"Question: {state['question']}\nQuery: {state['query']}\nResult: {state['result']}\nIs it correct?"
        return {"feedback": str(llm.invoke(prompt).content)}

    def rewrite_query(state: SQLState) -> SQLState:
        prompt = f"Rewrite the query {state['query']} for {state['question']} given: {state['feedback']}"
        query = str(llm.invoke(prompt).content).strip()
        return {"query": query, "result": _run(db_path, query, truncate_length), "turns": state["turns"] + 1}

    def next_step(state: SQLState) -> str:
        done = "correct" in state["feedback"].lower() and "incorrect" not in state["feedback"].lower()
        return END if done or state["turns"] >= max_turns else "rewrite_query"

    graph = StateGraph(SQLState)
    graph.add_node("write_query", write_query)
    graph.add_node("check_query", check_query)
    graph.add_node("rewrite_query", rewrite_query)
    graph.add_edge(START, "write_query")
    graph.add_edge("write_query", "check_query")
    graph.add_conditional_edges("check_query", next_step)
    graph.add_edge("rewrite_query", "check_query")
    return graph.compile()


def evaluate_query(query: str, ground_truth: str, db_path: str, *, raise_on_error: bool = True) -> float:
    """1.0 when the query returns the same rows as the ground truth (order ignored), else 0.0."""
    try:
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as connection:
            got = sorted(map(repr, connection.execute(query).fetchall()))
            expected = sorted(map(repr, connection.execute(ground_truth).fetchall()))
    except sqlite3.Error:
        if raise_on_error:
            raise
        return 0.0
    return 1.0 if got == expected else 0.0


def make_database(path: str) -> str:
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE singer (name TEXT, country TEXT, age INTEGER)")
        connection.executemany(
            "INSERT INTO singer VALUES (?, ?, ?)",
            [("Joe", "Netherlands", 52), ("Rose", "France", 41), ("Tribal", "France", 25)],
        )
    return path


def sql_replies(body: dict) -> str:
    """The test server's policy: a wrong first draft for questions about France, fixed by the rewrite."""
    prompt = body["messages"][-1]["content"]
    if "Is it correct?" in prompt:
        wrong = "France" in prompt and "WHERE" not in prompt
        return "The query is incorrect: filter by country." if wrong else "The query is correct."
    if "France" in prompt and prompt.startswith("Rewrite"):
        return "SELECT count(*) FROM singer WHERE country = 'France'"
    return "SELECT count(*) FROM singer"
