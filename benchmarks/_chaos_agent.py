"""The chaos run's agent (`benchmarks.chaos`): two named agents, each one LLM call, through the nemesis's fault proxy
(the task's `proxy`, as an agent behind a corporate proxy would call), so the nemesis can make the policy answer
503, hang, or cut the connection mid-answer. The writer's reward varies on a random model's samples and has no
reachable top where a group's rewards would tie (how close its share of letters from the first half of the alphabet
is to a half), so every step has something to train."""

from __future__ import annotations

import functools
from typing import Any

import openai

import lightning_otel as agl
from lightning_otel.testing.fault_proxy import UPSTREAM_HEADER


@functools.cache
def client(proxy: str, upstream: str, api_key: str) -> openai.OpenAI:
    # retries and a timeout a user would set: a hang longer than it is a failed attempt, which the runner retries
    return openai.OpenAI(base_url=proxy.rstrip("/") + "/", api_key=api_key, max_retries=2, timeout=15.0,
                         default_headers={UPSTREAM_HEADER: upstream})  # fmt: skip


def balance(text: str) -> float:
    """1 when half the reply's letters are from a-m, 0 when none or all are."""
    letters = [char for char in text.lower() if "a" <= char <= "z"]
    return 1.0 - 2.0 * abs(sum(char <= "m" for char in letters) / len(letters) - 0.5) if letters else 0.0


@agl.rollout
def chaos_agent(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    llm = resources["main_llm"]
    calls = client(task["proxy"], llm.get_base_url(rollout.rollout_id, rollout.attempt_id), llm.api_key)
    with agl.agent("writer"):
        reply = calls.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": f"Name a {task['word']}"}], max_tokens=12
        )
    text = reply.choices[0].message.content or ""
    with agl.agent("checker"):
        calls.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": f"Is {text!r} a {task['word']}?"}], max_tokens=4
        )
    return balance(text)
