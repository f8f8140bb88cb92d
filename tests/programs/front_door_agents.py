"""Agents the front door's tests train with the tiny model (`lightning-otel train --agent
tests.programs.front_door_agents:NAME`): a reward a random model's samples vary on, and agents that fail."""

from __future__ import annotations

import functools
from typing import Any

import openai

import lightning_otel as agl


@functools.cache
def client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=5)


def capitals_share(text: str) -> float:
    letters = [char for char in text if char.isalpha()]
    return sum(char.isupper() for char in letters) / len(letters) if letters else 0.0


@agl.rollout
def shout(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    """Two agents: `writer` answers (its capital-letter share is the reward), `checker` comments."""
    llm = resources["main_llm"]
    openai_client = client(llm.get_base_url(rollout.rollout_id, rollout.attempt_id), llm.api_key)
    with agl.agent("writer"):
        reply = openai_client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": f"Say {task['word']} in capitals"}], max_tokens=12
        )
    text = reply.choices[0].message.content or ""
    with agl.agent("checker"):
        openai_client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": f"Capitals? {text}"}], max_tokens=4
        )
    return capitals_share(text)


@agl.rollout
def flat(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    """Every rollout the same reward: nothing to learn, no pair to prefer."""
    llm = resources["main_llm"]
    openai_client = client(llm.get_base_url(rollout.rollout_id, rollout.attempt_id), llm.api_key)
    with agl.agent("writer"):
        openai_client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task["word"]}], max_tokens=4
        )
    return 0.0


def parse_the_answer(text: str) -> float:
    raise ValueError(f"cannot read a number from {text!r}")


@agl.rollout
def broken(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    """The agent's own bug: its helper raises (with -v its traceback is printed)."""
    llm = resources["main_llm"]
    openai_client = client(llm.get_base_url(rollout.rollout_id, rollout.attempt_id), llm.api_key)
    with agl.agent("writer"):
        reply = openai_client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task["word"]}], max_tokens=4
        )
    return parse_the_answer(reply.choices[0].message.content or "")
