"""A one-call agent with a format to keep: a product review's sentiment, in one word. Plain OpenAI client.

    lightning-otel train --model smollm2 --agent reviews:reviews --train tasks/reviews_train.jsonl \\
        --val tasks/reviews_val.jsonl

Reward: 1 for the bare label ("positive" or "negative", case and punctuation aside); a longer reply that holds the
right label and not the other gets 0.5 + 0.5 / its words (the shorter, the more); 0 otherwise.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import openai

import lightning_otel as agl

LABELS = ("positive", "negative")


@functools.cache
def client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=5)


def label_reward(reply: str, label: str) -> float:
    words = re.findall(r"[a-z]+", reply.lower())
    other = LABELS[1 - LABELS.index(label)]
    if label not in words or other in words:
        return 0.0
    return 0.5 + 0.5 / len(words)


@agl.rollout
def reviews(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    llm = resources["main_llm"]
    openai_client = client(llm.get_base_url(rollout.rollout_id, rollout.attempt_id), llm.api_key)
    question = f'Is this review positive or negative? Answer with one word.\n\nReview: "{task["review"]}"'
    with agl.agent("critic"):
        reply = openai_client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": question}], max_tokens=16
        )
    return label_reward(reply.choices[0].message.content or "", task["label"])
