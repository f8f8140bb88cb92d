"""Agents the Tinker tests run in runner processes (importable by name: `tests.tinker.agents:...`)."""

from __future__ import annotations

from typing import Any

from openai import OpenAI

import lightning_otel as agl


def _answer(task: dict[str, Any], llm: agl.LLM) -> str:
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=3)
    response = client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=8
    )
    return response.choices[0].message.content or ""


@agl.rollout
def short_answer_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Rewards shorter answers: sampled answers differ, so every group carries an advantage."""
    return 1.0 / (1.0 + len(_answer(task, llm)))


@agl.rollout
def constant_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """The same reward whatever the answer: no group teaches anything."""
    _answer(task, llm)
    return 1.0


@agl.rollout
def planner_and_caller_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Two agents in each rollout: a planner writes a plan, a caller answers from it (each a named agent, so the
    gateway serves each call with its agent's policy); shorter answers earn more, so groups vary."""
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=3)
    with agl.agent("planner"):
        plan = client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": f"Plan: {task['question']}"}], max_tokens=8
        )
    with agl.agent("caller"):
        answer = client.chat.completions.create(
            model=llm.model,
            messages=[{"role": "user", "content": f"Call with: {plan.choices[0].message.content}"}],
            max_tokens=8,
        )
    return 1.0 / (1.0 + len(answer.choices[0].message.content or ""))
