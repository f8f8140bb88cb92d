"""The medical SQL agent of the AgentGRPO tutorial, on the OpenAI Agents SDK, judged by a reward model.

The agent ("MedicalSQLAgent") answers a question about drugs or diseases by querying the SQLite database with its
`run_sql` tool, then answering in one sentence. Its reward combines two sources, each recorded as a span:
- `execution`: 1.0 when the answer states every fact the database holds for the question, else 0.0;
- `reward_model`: the trained reward model's score of the answer (`agl.score_answer`: a `score {model}` span,
  the score as an `agl.reward` with the model as its source, linked to the LLM call that produced the answer).
The primary reward is `EXECUTION_WEIGHT * execution + REWARD_MODEL_WEIGHT * reward_model` (`agl.weighted_reward`).

Runners run `medical_rollout` with two resources: `main_llm` (the policy) and `reward_model` ({"url", "api_key"?}).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool
from agents.exceptions import AgentsException
from medical_data import INSTRUCTIONS, answer_is_right
from openai import AsyncOpenAI

import lightning_otel as agl

HERE = Path(__file__).resolve().parent
AGENT_NAME = "MedicalSQLAgent"
DATABASE = Path(os.environ.get("AGL_MEDICAL_DB", HERE / "data" / "medical.sqlite3"))
EXECUTION_WEIGHT, REWARD_MODEL_WEIGHT = 1.0, 0.5

# No set_tracing_disabled(): lightning-otel's Agents SDK instrumentor works through the SDK's tracing (it names the
# agent around each LLM call) and replaces the SDK's upload to OpenAI while instrumented, as runners are.


@function_tool
def run_sql(query: str) -> str:
    """Run a read-only SQL query on the medical database; rows as JSON, or the error."""
    try:
        with sqlite3.connect(f"file:{DATABASE}?mode=ro", uri=True) as db:
            rows = db.execute(query).fetchmany(20)
    except sqlite3.Error as exc:
        return f"SQL error: {exc}"
    return json.dumps(rows)


def medical_agent(model: OpenAIChatCompletionsModel) -> Agent:
    return Agent(name=AGENT_NAME, instructions=INSTRUCTIONS, tools=[run_sql], model=model,
                 model_settings=ModelSettings(temperature=1.0, max_tokens=64))  # fmt: skip


_judges: dict[tuple[int, str], agl.RewardModelClient] = {}


def judge_for(resource: dict[str, Any]) -> agl.RewardModelClient:
    """One client per event loop and service: concurrent rollouts' scores share requests."""
    key = (id(asyncio.get_running_loop()), resource["url"])
    if key not in _judges:
        _judges[key] = agl.RewardModelClient(resource["url"], api_key=resource.get("api_key"))
    return _judges[key]


def last_response_id(result: Any) -> str | None:
    """The chat completion id of the agent's last model response (the Agents SDK keeps it in provider_data)."""
    for response in reversed(getattr(result, "raw_responses", [])):
        for item in reversed(response.output):
            data = getattr(item, "provider_data", None) or (getattr(item, "model_extra", None) or {}).get(
                "provider_data"
            )
            if isinstance(data, dict) and data.get("response_id"):
                return str(data["response_id"])
    return None


@agl.rollout
async def medical_rollout(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> None:
    llm = resources["main_llm"]
    client = AsyncOpenAI(base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt_id),
                         api_key=llm.api_key or "unused", max_retries=5)  # fmt: skip
    model = OpenAIChatCompletionsModel(model=llm.model, openai_client=client)
    try:
        result = await Runner.run(medical_agent(model), task["question"], max_turns=4)
        answer, response_id = str(result.final_output or ""), last_response_id(result)
    except AgentsException as exc:  # e.g. more turns than allowed: the answer is empty, the reward says so
        # the judgement still goes to the call that ended the run without an answer
        answer, response_id = f"(no answer: {type(exc).__name__})", last_response_id(exc.run_data)
    judged = [{"role": "user", "content": task["question"]}, {"role": "assistant", "content": answer}]
    judge = judge_for(resources["reward_model"])
    score = await agl.score_answer(judge, judged, response_id=response_id, emit=False)
    execution = 1.0 if answer_is_right(answer, task["facts"]) else 0.0
    agl.weighted_reward(
        {"execution": execution, "reward_model": score},
        {"execution": EXECUTION_WEIGHT, "reward_model": REWARD_MODEL_WEIGHT},
        sources={"execution": "sqlite facts", "reward_model": await judge.name()},
        response_id=response_id,
    )
