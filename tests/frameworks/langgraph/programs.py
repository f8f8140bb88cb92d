"""Two LangGraph programs written the way its docs teach: a hand-built write/check/rewrite SQL graph (each node an
agent), and a supervisor (langgraph-supervisor) routing to two named sub-agents built with `create_agent`."""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph_supervisor import create_supervisor

import lightning_otel as agl
from examples.sql_agent.graph_agent import build_graph
from lightning_otel.testing import Reply, ToolCall


def chat_model(base_url: str) -> ChatOpenAI:
    return ChatOpenAI(model="agl-tiny", base_url=base_url, api_key="test", max_retries=0)


def sql_graph(base_url: str):
    """The example's graph (examples/sql_agent/graph_agent.py), as its docs-style program."""
    return build_graph(chat_model(base_url))


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


@agl.rollout
def supervisor_rollout(task: dict, llm: agl.LLM) -> float:
    """The supervisor team as a rollout in a runner: reward 1 when the answer holds 5."""
    llm_model = ChatOpenAI(model=llm.model, base_url=llm.endpoint, api_key="test", max_retries=0)
    math = create_agent(llm_model, tools=[add], name="math", system_prompt="You do arithmetic with the add tool.")
    research = create_agent(llm_model, tools=[lookup], name="research", system_prompt="You look things up.")
    graph = create_supervisor([math, research], model=llm_model, prompt="Route math questions to math.").compile()
    result = graph.invoke({"messages": [{"role": "user", "content": task["question"]}]})
    return 1.0 if "5" in str(result["messages"][-1].content) else 0.0
