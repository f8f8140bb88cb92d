"""The ADK agent for training: a SQL agent written with Google ADK, and `LitAdkAgent`, which builds it per rollout
from the `main_llm` resource and scores its final query by execution match.

    sql_agent (LoopAgent, at most `max_turns` rounds)
      sql_writer  (LlmAgent, tool run_sql)   writes a query, may try it, answers with it in a ```sql block
      sql_checker (LlmAgent, tool exit_loop) reads the query and its result; exit_loop when it is right

The model is ADK's `LiteLlm` pointed at the endpoint the trainer hands out (`llm.get_base_url(rollout_id,
attempt_id)`), so every call goes through LiteLLM, which lightning-otel traces with the server's token ids. The
tasks, databases and evaluator are the SQL tutorial's (`examples/spider`): Spider records `{db_id, question, query}`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The SQL tutorial's evaluator and SQL helpers; appended, so this folder's prepare_dataset.py comes first.
sys.path.append(str(HERE.parent / "spider"))

from google.adk.agents import LlmAgent, LoopAgent  # noqa: E402
from google.adk.agents.readonly_context import ReadonlyContext  # noqa: E402
from google.adk.models.lite_llm import LiteLlm  # noqa: E402
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.adk.tools import exit_loop  # noqa: E402
from google.genai import types  # noqa: E402
from spider_eval import evaluate_query, partial_credit  # noqa: E402
from sql_tools import parse_query, run_query, table_info  # noqa: E402

import lightning_otel as agl  # noqa: E402

WRITER = "sql_writer"
CHECKER = "sql_checker"

WRITER_INSTRUCTION = """You are an agent designed to interact with a SQLite database. Given the user's question, write
one syntactically correct SQLite query that answers it. Use only the columns in the schema. You may call run_sql to
try a query. If a checker found a mistake in your last query, fix it.

## Table Schema ##

{schema}

## Output Format ##

Respond with the final query only:

```sql
GENERATED QUERY
```"""

CHECKER_INSTRUCTION = """You are a SQL expert with a strong attention to detail. Check the query written for the
user's question against the schema and its execution result: wrong tables or columns, wrong joins or filters, a
result that does not answer the question, an execution error. If the query is right, call exit_loop. Otherwise list
the mistakes.

## Table Schema ##

{schema}

## Query ##

```sql
{query}
```

## Execution result ##

{execution}"""


def data_dir() -> Path:
    return Path(os.environ.get("ADK_DATA_DIR", HERE / "data"))


def database_path(directory: Path, db_id: str) -> Path:
    return directory / "database" / db_id / f"{db_id}.sqlite"


def build_adk_sql_agent(
    model: LiteLlm, database: Path, *, max_turns: int = 2, truncate_length: int = 1024
) -> LoopAgent:
    """The ADK orchestration for one database. The writer's last answer is in the session state as `query`."""
    schema = table_info(database)

    def run_sql(query: str) -> str:
        """Run one SQLite query on the question's database and return its rows (or the error)."""
        return run_query(query, database, truncate_length)

    def checker_instruction(context: ReadonlyContext) -> str:
        # A provider, not a template: the schema's sample rows may hold braces ADK would read as state keys.
        query = parse_query(str(context.state.get("query", "")))
        return CHECKER_INSTRUCTION.format(
            schema=schema, query=query, execution=run_query(query, database, truncate_length)
        )

    writer = LlmAgent(
        name=WRITER,
        model=model,
        instruction=lambda _: WRITER_INSTRUCTION.format(schema=schema),
        tools=[run_sql],
        output_key="query",
    )
    checker = LlmAgent(name=CHECKER, model=model, instruction=checker_instruction, tools=[exit_loop])
    return LoopAgent(name="sql_agent", sub_agents=[writer, checker], max_iterations=max_turns)


def litellm_model(llm: agl.LLM, base_url: str) -> LiteLlm:
    """ADK's LiteLLM model on any OpenAI-compatible endpoint (vLLM, the trainer's gateway, OpenAI itself)."""
    sampling = {
        key: value for key, value in llm.sampling_parameters.items() if key in ("temperature", "top_p", "max_tokens")
    }
    return LiteLlm(model=f"openai/{llm.model}", api_base=base_url, api_key=llm.api_key or "dummy", **sampling)


async def answer(agent: LoopAgent, question: str) -> str:
    """Run the agent on one question; the query it ended with ('' when the writer never answered)."""
    runner = InMemoryRunner(agent=agent, app_name="adk-sql")
    session = await runner.session_service.create_session(app_name="adk-sql", user_id="trainer")
    message = types.Content(role="user", parts=[types.Part(text=question)])
    async for _event in runner.run_async(user_id="trainer", session_id=session.id, new_message=message):
        pass
    final = await runner.session_service.get_session(app_name="adk-sql", user_id="trainer", session_id=session.id)
    return parse_query(str(final.state.get("query", ""))) if final else ""


class LitAdkAgent(agl.LitAgent[dict[str, Any]]):
    """One rollout: build the ADK agent from `main_llm`, answer the task's question, reward = execution match
    (`partial=True`: with partial credit for a query close to the gold one, `spider_eval.partial_credit`)."""

    def __init__(self, max_turns: int = 2, data: str | Path | None = None, *, partial: bool = False) -> None:
        self.max_turns = max_turns
        self.data = Path(data) if data is not None else None
        self.partial = partial

    async def rollout_async(self, task: dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        llm: agl.LLM = resources["main_llm"]
        database = database_path(self.data or data_dir(), task["db_id"])
        model = litellm_model(llm, llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id))
        query = await answer(build_adk_sql_agent(model, database, max_turns=self.max_turns), task["question"])
        # The gold query is read only here, after the agent answered: it never reaches a prompt.
        matched = evaluate_query(query, task["query"], database, raise_on_error=False)
        return partial_credit(query, task["query"], matched) if self.partial else matched
