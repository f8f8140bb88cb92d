"""Agents the training-loop tests run in runner processes (importable by name: `tests.training.agents:...`)."""

from __future__ import annotations

from typing import Any

from openai import OpenAI

import lightning_otel as agl


@agl.rollout
def length_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """One call; the reward is the answer's length (varies within a group), or a constant when the task says so."""
    client = OpenAI(base_url=llm.endpoint, api_key="unused", max_retries=3)
    response = client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=16
    )
    answer = response.choices[0].message.content or ""
    return 1.0 if task.get("constant") else float(len(answer.split()))
