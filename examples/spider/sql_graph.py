"""The SQL agent as a LangGraph graph: write a query, execute it on the task's database, check it, rewrite it.

    write_query -> execute_query -> check_query -> END              (the check says THE QUERY IS CORRECT.)
                                               -> rewrite_query -> execute_query -> check_query -> ...

A turn is one write (or rewrite), execute and check; the loop ends when the check is satisfied or after
`max_turns`. With `check_last_turn=False` the last turn ends after execution: that check's verdict could only ask
for a rewrite there is no turn left for (the CPU profile, one turn, saves half its sampling). Execution is real
(SQLite, read-only, with a deadline), its result is truncated to `truncate_length` characters before the checker
sees it. This module knows nothing of training: it is the agent people already have (lightning-otel traces it from
outside; `sql_agent.py` wraps it for training).
"""

from __future__ import annotations

import functools
import ssl
from typing import Any, TypedDict

import certifi
import httpx
from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from sql_tools import parse_query, run_query, table_info

WRITE_QUERY_PROMPT = ChatPromptTemplate(
    [
        (
            "system",
            "You are an agent designed to interact with a SQL database. Given an input question, create a "
            "syntactically correct {dialect} query to run to help find the answer. Use only the columns you can "
            "see in the schema, and mind which column is in which table.\n\n"
            "## Table Schema ##\n\n{table_info}\n\n"
            "## Output Format ##\n\nRespond in the following format:\n\n```{dialect}\nGENERATED QUERY\n```",
        ),
        ("user", "Question: {input}"),
    ]
)

CHECK_QUERY_PROMPT = ChatPromptTemplate(
    [
        (
            "system",
            "You are a SQL expert with a strong attention to detail. Double check the {dialect} query for common "
            "mistakes: wrong tables or columns, wrong joins or filters, a result that does not answer the "
            "question, an execution error.\n\n## Table Schema ##\n\n{table_info}\n\n"
            "## Output Format ##\n\nList each mistake you find, then end with exactly one of: "
            "THE QUERY IS INCORRECT. / THE QUERY IS CORRECT.",
        ),
        ("user", "Question: {input}\n\nQuery:\n```{dialect}\n{query}\n```\n\nExecution result:\n{execution}"),
    ]
)

REWRITE_QUERY_PROMPT = ChatPromptTemplate(
    [
        (
            "system",
            "You are an agent designed to interact with a SQL database. Rewrite the previous {dialect} query to "
            "fix the errors the feedback lists.\n\n## Table Schema ##\n\n{table_info}\n\n"
            "## Output Format ##\n\nRespond in the following format:\n\n```{dialect}\nREWRITTEN QUERY\n```",
        ),
        (
            "user",
            "Question: {input}\n\nPrevious query:\n```{dialect}\n{query}\n```\n\nExecution result:\n{execution}"
            "\n\nFeedback:\n{feedback}",
        ),
    ]
)

CORRECT = "THE QUERY IS CORRECT."
INCORRECT = "THE QUERY IS INCORRECT."


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One CA-bundle load per process. Left to itself, each ChatOpenAI builds two httpx clients, each loading
    certifi's bundle (~20 ms of CPU apiece), and caches them by base URL, which the trainer makes per rollout."""
    return ssl.create_default_context(cafile=certifi.where())


@functools.cache
def _shared_http_client() -> httpx.Client:
    """One connection pool for every graph of the process (httpx clients are thread-safe)."""
    return httpx.Client(verify=_tls_context())


class State(TypedDict, total=False):
    question: str
    query: str
    execution: str
    feedback: str
    num_turns: int


def build_langgraph_sql_agent(
    database_path: str,
    openai_base_url: str,
    model: str,
    sampling_parameters: dict[str, Any],
    max_turns: int,
    truncate_length: int,
    api_key: str = "dummy",
    check_last_turn: bool = True,
) -> Any:
    """The compiled graph for one database; invoke it with `{"question": ...}`, read `["query"]`."""
    path = database_path.removeprefix("sqlite:///")
    schema = table_info(path)
    dialect = "sqlite"
    llm = ChatOpenAI(
        model=model,
        base_url=openai_base_url,
        api_key=api_key,
        max_retries=5,  # the trainer's gateway answers 503 + Retry-After while it syncs weights
        http_client=_shared_http_client(),
        http_async_client=httpx.AsyncClient(verify=_tls_context()),  # its own: bound to the loop that uses it
        **{key: value for key, value in sampling_parameters.items() if key in ("temperature", "max_tokens", "top_p")},
    )

    def invoke(prompt: ChatPromptTemplate, **values: Any) -> str:
        reply = llm.invoke(prompt.invoke({"dialect": dialect, "table_info": schema, **values}))
        return str(reply.content) if isinstance(reply, AIMessage) else str(reply)

    def write_query(state: State) -> State:
        return {"query": parse_query(invoke(WRITE_QUERY_PROMPT, input=state["question"])), "num_turns": 1}

    def execute_query(state: State) -> State:
        return {"execution": run_query(state["query"], path, truncate_length)}

    def check_query(state: State) -> State:
        feedback = invoke(
            CHECK_QUERY_PROMPT, input=state["question"], query=state["query"], execution=state["execution"]
        )
        return {"feedback": feedback}

    def rewrite_query(state: State) -> State:
        reply = invoke(
            REWRITE_QUERY_PROMPT,
            input=state["question"],
            query=state["query"],
            execution=state["execution"],
            feedback=state["feedback"],
        )
        return {"query": parse_query(reply), "num_turns": state.get("num_turns", 0) + 1}

    def should_check(state: State) -> str:
        return "check_query" if check_last_turn or state.get("num_turns", 0) < max_turns else END

    def should_continue(state: State) -> str:
        feedback = state.get("feedback", "")
        if CORRECT in feedback and INCORRECT not in feedback:
            return END
        return END if state.get("num_turns", 0) >= max_turns else "rewrite_query"

    builder = StateGraph(State)
    builder.add_node(write_query)
    builder.add_node(execute_query)
    builder.add_node(check_query)
    builder.add_node(rewrite_query)
    builder.add_edge(START, "write_query")
    builder.add_edge("write_query", "execute_query")
    builder.add_conditional_edges("execute_query", should_check, {"check_query": "check_query", END: END})
    builder.add_conditional_edges("check_query", should_continue, {END: END, "rewrite_query": "rewrite_query"})
    builder.add_edge("rewrite_query", "execute_query")
    return builder.compile()
