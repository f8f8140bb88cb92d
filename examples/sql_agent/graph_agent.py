"""The SQL agent as a LangGraph graph: `write` drafts a query, `check` reviews it, `rewrite` fixes it when the check
says it is wrong. Each node is an agent in the traces (no code for that here); `agent_match="write"` trains the
`write` and `rewrite` calls and leaves `check` alone.

    lightning-otel train --agent examples.sql_agent.graph_agent:sql_graph_rollout \\
        --train examples/sql_agent/tasks.jsonl --model /path/to/hf-model --agent-match write
    lightning-otel train --ci-fast --agent examples.sql_agent.graph_agent:sql_graph_rollout \\
        --train examples/sql_agent/tasks.jsonl --agent-match write        # 2 GRPO steps of a tiny model on CPU

The reward scores the final query: full marks for `SELECT ... FROM ...`, and partial credit for writing SQL keywords
in capitals (the share of capital letters), so even a tiny random policy gets a signal that varies within a group.
"""

from __future__ import annotations

import functools
from typing import Any, TypedDict

from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

import lightning_otel


class SQLState(TypedDict, total=False):
    question: str
    query: str
    verdict: str


def sql_reward(query: str) -> float:
    """In [0, 1]: half for the query's structure (starts with SELECT, has FROM), half for the capitals share."""
    text = query.strip()
    letters = [char for char in text if char.isalpha()]
    capitals = sum(char.isupper() for char in letters) / len(letters) if letters else 0.0
    upper = f" {text.upper()} "
    structure = 0.5 * upper.lstrip().startswith("SELECT") + 0.5 * (" FROM " in upper)
    return round(0.5 * structure + 0.5 * capitals, 6)


def build_graph(llm: ChatOpenAI) -> Any:
    def write(state: SQLState) -> SQLState:
        return {"query": str(llm.invoke(f"Write a SQL query: {state['question']}").content)}

    def check(state: SQLState) -> SQLState:
        return {"verdict": str(llm.invoke(f"Check this query: {state['query']}").content)}

    def rewrite(state: SQLState) -> SQLState:
        prompt = f"Rewrite the query {state['query']} given: {state['verdict']}"
        return {"query": str(llm.invoke(prompt).content)}

    graph = StateGraph(SQLState)
    graph.add_node("write", write)
    graph.add_node("check", check)
    graph.add_node("rewrite", rewrite)
    graph.add_edge(START, "write")
    graph.add_edge("write", "check")
    graph.add_conditional_edges("check", lambda state: "rewrite" if "wrong" in state["verdict"].lower() else END)
    graph.add_edge("rewrite", END)
    return graph.compile()


@functools.cache
def _graph(base_url: str, model: str, api_key: str) -> Any:
    # One client and graph per endpoint, shared by the runner's concurrent rollouts; retries cover the gateway's
    # 503 + Retry-After while the trainer syncs weights.
    return build_graph(ChatOpenAI(model=model, base_url=base_url, api_key=api_key, max_retries=5))


@lightning_otel.rollout
def sql_graph_rollout(task: dict[str, Any], resources: dict[str, Any], rollout: lightning_otel.Rollout) -> float:
    llm = resources["main_llm"]
    graph = _graph(llm.get_base_url(rollout.rollout_id, rollout.attempt_id), llm.model, llm.api_key)
    state = graph.invoke({"question": task["question"]})
    return sql_reward(state["query"])
