"""Agent Lightning users' code as their tutorials write it (../shared/seeds), with one change: the import line.

Runner processes import this module, so every agent is at module level. Where a tutorial's snippet is pseudo-code
(names it never defines), the missing pieces are defined here and marked as ours.
"""

# ruff: noqa: UP006, UP035  (Agent Lightning's tutorials write typing.Dict; kept as they write it)
from __future__ import annotations

import os
import re
from typing import Any, Dict

import openai

import lightning_otel as agl  # was: import agentlightning as agl

# --- the Tinker tutorial (seed 004): a plain-function agent, in Agent Lightning's `(task, llm: agl.LLM)` form ------
MAX_TURNS = 3  # ours: the tutorial leaves it to the reader


def extract_number(text: str) -> int:  # ours: the tutorial's helper, not shown there
    found = re.search(r"-?\d+", text or "")
    return int(found.group()) if found else -1


@agl.rollout
def guess_number_agent(task: Dict[str, Any], llm: agl.LLM) -> float:
    gold_answer = task["gold_answer"]
    client = openai.OpenAI(base_url=llm.endpoint, api_key=llm.api_key, max_retries=0)
    messages = [{"role": "user", "content": "Guess a number between 1 and 100."}]
    for _ in range(MAX_TURNS):
        response = client.chat.completions.create(model=llm.model, messages=messages)
        response_content = response.choices[0].message.content
        messages.append({"role": "assistant", "content": response_content})
        guessed_number = extract_number(response_content)
        if guessed_number == gold_answer:
            return 1.0
        elif guessed_number < gold_answer:
            messages.append({"role": "user", "content": "Too small"})
        else:
            messages.append({"role": "user", "content": "Too large"})
    return 0.0


def guess_replies(body: dict) -> str:
    """The test server's player: guesses 50, then 75 after "Too small", 25 after "Too large"."""
    last = body["messages"][-1]["content"]
    return {"Too small": "75", "Too large": "25"}.get(last, "50")


# --- the ADK tutorial (seed 000): `LitAdkAgent` returns a scalar reward from `rollout(...)` -----------------------
class LitAdkAgent(agl.LitAgent[Dict[str, Any]]):
    """Stands in for examples/google_adk/adk_agent.py (tested for real in the verl lane): the LLM calls run inside a
    framework agent named `root_agent`, as ADK's `invoke_agent root_agent` span names them."""

    def rollout(self, task: Dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        llm: agl.LLM = resources["main_llm"]
        client = openai.OpenAI(base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id),
                               api_key=llm.api_key or "unused", max_retries=0)  # fmt: skip
        with agl.agent("root_agent"):
            plan = client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": f"Plan: {task['question']}"}]
            )
            answer = client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": f"Answer: {plan.choices[0].message.content}"}]
            )
        return sql_credit(answer.choices[0].message.content or "")


def sql_credit(text: str) -> float:
    """1 for a query that says SELECT; otherwise the share of capital letters (SQL keywords are written in
    capitals): a graded score that a random policy's attempts differ on, so GRPO has a signal from the first step
    (a 0/1 score gives every group equal rewards, and such a step trains nothing)."""
    if "SELECT" in text:
        return 1.0
    letters = [char for char in text if char.isalpha()]
    return sum(char.isupper() for char in letters) / len(letters) if letters else 0.0


def adk_trainer_block(algorithm: Any) -> agl.Trainer:
    """The tutorial's `agl.Trainer(...)` block, verbatim but for the runner count (2 cores in CI)."""
    return agl.Trainer(
        n_runners=2,
        algorithm=algorithm,
        adapter={"agent_match": "LitAdkAgent"},
        initial_resources={
            "main_llm": agl.LLM(
                endpoint=os.environ["OPENAI_API_BASE"],
                model=os.environ["OPENAI_MODEL"],
                api_key=os.environ["OPENAI_API_KEY"],
                sampling_parameters={"temperature": 0.0},
            )
        },
    )


# --- Agent Lightning's async and split train/validation agents, and rewards emitted its way -------------------------
class AsyncSplitAgent(agl.LitAgent[Dict[str, Any]]):
    """`rollout_async` for training, a different sync `validation_rollout`; rewards through `emit_reward(reward=...)`
    and a dict with `primary_key`."""

    async def rollout_async(self, task: Dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> None:
        llm: agl.LLM = resources["main_llm"]
        client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
        await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task["question"]}])
        agl.emit_reward(reward=0.5)

    def validation_rollout(self, task: Dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> None:
        agl.emit_reward({"accuracy": 1.0, "brevity": 0.25}, primary_key="accuracy")


# --- failures that must be loud -------------------------------------------------------------------------------------
class BrokenAgent(agl.LitAgent[Dict[str, Any]]):
    def rollout(self, task: Dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        raise ConnectionError(f"database {task['db_id']} is unreachable")


broken_agent = BrokenAgent()


@agl.rollout
def silent_agent(task: Dict[str, Any]) -> float:
    """Makes no LLM call at all (e.g. its client is not the instrumented one): succeeds, gives no sample."""
    return 1.0
