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


@agl.rollout
def slow_length_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """`length_agent`, then `sleep_s` of the task's own work (a tool) after the call; with `die_once` (a file path
    that does not exist yet), the runner process dies mid-rollout on the first attempt, after the call."""
    import os
    import time
    from pathlib import Path

    reward = _length(task, llm)
    time.sleep(float(task.get("sleep_s", 0.0)))
    if (marker := task.get("die_once")) and not Path(marker).exists():
        Path(marker).write_text(str(os.getpid()))
        os._exit(9)  # the runner process dies with the rollout running
    return reward


def _length(task: dict[str, Any], llm: agl.LLM) -> float:
    client = OpenAI(base_url=llm.endpoint, api_key="unused", max_retries=3)
    response = client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=16
    )
    return float(len((response.choices[0].message.content or "").split()))


@agl.rollout
def bare_length_agent(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    """A client nothing of ours instruments (raw HTTP to the rollout's path on the gateway, its agent named by a
    header, as an agent service in another language would): two calls; the reward is the answers' length."""
    import httpx

    url = resources["main_llm"].get_base_url(rollout.rollout_id, rollout.attempt_id) + "/chat/completions"
    words = 0
    for turn in range(2):
        body = {"model": "agl-tiny", "messages": [{"role": "user", "content": f"{task['question']} {turn}"}]}
        answer = httpx.post(url, json=body, headers={"x-agl-agent-name": "solver"}, timeout=30)
        answer.raise_for_status()
        words += len((answer.json()["choices"][0]["message"]["content"] or "").split())
    return float(words)


@agl.rollout
def answer_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """One call asking the task's question; the reward is 1 when the reply is the task's answer."""
    client = OpenAI(base_url=llm.endpoint, api_key="unused", max_retries=3)
    response = client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=16
    )
    return 1.0 if (response.choices[0].message.content or "").strip() == task["answer"] else 0.0
