"""Two LangGraph programs written the way its docs teach: a hand-built write/check/rewrite SQL graph (each node an
agent), and a supervisor (langgraph-supervisor) routing to two named sub-agents built with `create_agent`."""

from __future__ import annotations

from typing import TypedDict

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph_supervisor import create_supervisor

from lightning_otel.testing import Reply, ToolCall


def chat_model(base_url: str) -> ChatOpenAI:
    return ChatOpenAI(model="agl-tiny", base_url=base_url, api_key="test", max_retries=0)


class SQLState(TypedDict, total=False):
    question: str
    query: str
    verdict: str


def sql_graph(base_url: str):
    llm = chat_model(base_url)

    def write(state: SQLState) -> SQLState:
        return {"query": llm.invoke(f"Write a SQL query: {state['question']}").content}

    def check(state: SQLState) -> SQLState:
        return {"verdict": llm.invoke(f"Check this query: {state['query']}").content}

    def rewrite(state: SQLState) -> SQLState:
        prompt = f"Rewrite the query {state['query']} given: {state['verdict']}"
        return {"query": llm.invoke(prompt).content}

    graph = StateGraph(SQLState)
    graph.add_node("write", write)
    graph.add_node("check", check)
    graph.add_node("rewrite", rewrite)
    graph.add_edge(START, "write")
    graph.add_edge("write", "check")
    graph.add_conditional_edges("check", lambda s: "rewrite" if "wrong" in s["verdict"] else END)
    graph.add_edge("rewrite", END)
    return graph.compile()


SQL_REPLIES = ["SELECT * FROM t;", "The query is wrong: add a filter.", "SELECT * FROM t WHERE year = 2024;"]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"


def supervisor_graph(base_url: str):
    llm = chat_model(base_url)
    math = create_agent(llm, tools=[add], name="math", system_prompt="You do arithmetic with the add tool.")
    research = create_agent(llm, tools=[lookup], name="research", system_prompt="You look things up.")
    return create_supervisor([math, research], model=llm, prompt="Route math questions to math.").compile()


SUPERVISOR_REPLIES = [
    Reply(tool_calls=[ToolCall("transfer_to_math", "{}")]),
    Reply(tool_calls=[ToolCall("add", '{"a": 2, "b": 3}')]),
    "2 + 3 = 5",
    "The answer is 5.",
]
