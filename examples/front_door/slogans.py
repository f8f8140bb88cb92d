"""A two-agent pipeline in LangGraph: a planner names what a product is good for, a writer turns it into a slogan.

    lightning-otel train --model smollm2 --agent slogans:slogans --train tasks/slogans_train.jsonl \\
        --val tasks/slogans_val.jsonl --agent-match writer

The agents are the graph's nodes (`planner`, `writer`: the names on their LLM calls' spans). Reward on the writer's
slogan: half for naming the product once or twice as a word of its own, half for two to six distinct words of at
most 14 letters (so "lamplamplamp" and "lamp lamp lamp" are no slogans).
"""

from __future__ import annotations

import re
from typing import Any, TypedDict

from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

import lightning_otel as agl

MAX_WORDS = 6


class Draft(TypedDict, total=False):
    product: str
    plan: str
    slogan: str


def slogan_reward(slogan: str, product: str) -> float:
    words = [word.lower() for word in re.findall(r"[A-Za-z0-9']+", slogan)]
    named = 1 <= words.count(product.lower()) <= 2
    short = 2 <= len(words) <= MAX_WORDS and len(set(words)) == len(words) and max(map(len, words)) <= 14
    return 0.5 * named + 0.5 * short


def graph(llm: ChatOpenAI) -> Any:
    def planner(state: Draft) -> Draft:
        answer = llm.invoke(f"Name one thing a {state['product']} is good for, in a few words.", max_tokens=16)
        return {"plan": str(answer.content)}

    def writer(state: Draft) -> Draft:
        prompt = (f"Write a slogan for {state['product']} of at most {MAX_WORDS} words that says the word "
                  f"\"{state['product']}\". It is good for: {state['plan']}")  # fmt: skip
        return {"slogan": str(llm.invoke(prompt, max_tokens=24).content)}

    builder = StateGraph(Draft)
    builder.add_node("planner", planner)
    builder.add_node("writer", writer)
    builder.add_edge(START, "planner")
    builder.add_edge("planner", "writer")
    builder.add_edge("writer", END)
    return builder.compile()


@agl.rollout
def slogans(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    llm = resources["main_llm"]
    chat = ChatOpenAI(base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt_id), api_key=llm.api_key,
                      model=llm.model, max_retries=5)  # fmt: skip
    done = graph(chat).invoke({"product": task["product"]})
    return slogan_reward(done["slogan"], task["product"])
