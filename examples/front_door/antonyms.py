"""A one-call agent with a format to keep: the opposite of a word, in one word. Plain OpenAI client.

    lightning-otel train --model smollm2 --agent antonyms:antonyms --train tasks/antonyms_train.jsonl \\
        --val tasks/antonyms_val.jsonl

Reward: 1 for the bare opposite (any accepted spelling, case and punctuation aside); a longer reply that holds it
gets 0.5 + 0.5 / its words (the shorter, the more); 0 otherwise.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import openai

import lightning_otel as agl


@functools.cache
def client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=5)


def words_of(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def antonym_reward(reply: str, answers: list[str]) -> float:
    words = words_of(reply)
    return 0.5 + 0.5 / len(words) if any(answer in words for answer in answers) else 0.0


@agl.rollout
def antonyms(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    llm = resources["main_llm"]
    openai_client = client(llm.get_base_url(rollout.rollout_id, rollout.attempt_id), llm.api_key)
    question = f'What is the opposite of "{task["word"]}"? Answer with one word.'
    with agl.agent("antonym"):
        reply = openai_client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": question}], max_tokens=16
        )
    return antonym_reward(reply.choices[0].message.content or "", task["answers"])
