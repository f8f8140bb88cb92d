"""A tool-calling agent: it looks up how many of an item a warehouse holds with the `stock` tool, then answers.
Plain OpenAI client; the tool call is read from the model's text as vLLM's hermes parser reads it.

    lightning-otel train --model smollm2 --agent inventory:inventory --train tasks/inventory_train.jsonl \\
        --val tasks/inventory_val.jsonl --warm-start tasks/inventory_warm_start.jsonl

The untrained model never calls the tool; the warm start (`--warm-start`) shows the call's format on a dozen
check-ups phrased otherwise than the tasks ("Stock check: bolts at north."), then RL trains on the tasks. Reward: 1
when the final answer holds the stock count, 0.3 when the tool was called with the right item and warehouse but the
answer missed the count, 0 otherwise.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any

import openai

import lightning_otel as agl

TOOLS = [{
    "type": "function",
    "function": {
        "name": "stock",
        "description": "How many units of an item a warehouse holds",
        "parameters": {
            "type": "object",
            "properties": {"item": {"type": "string"}, "warehouse": {"type": "string"}},
            "required": ["item", "warehouse"],
        },
    },
}]  # fmt: skip


def stock(item: str, warehouse: str) -> int:
    """The inventory: a count per (item, warehouse), the same every time (nothing a model could know)."""
    digest = hashlib.sha256(f"{item.strip().lower()}@{warehouse.strip().lower()}".encode()).digest()
    return 10 + int.from_bytes(digest[:4], "big") % 990


@functools.cache
def client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=5)


def question(task: dict[str, Any]) -> str:
    return f"How many {task['item']} does the {task['warehouse']} warehouse hold? Answer with the number."


@agl.rollout
def inventory(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    llm = resources["main_llm"]
    openai_client = client(llm.get_base_url(rollout.rollout_id, rollout.attempt_id), llm.api_key)
    messages: list[dict[str, Any]] = [{"role": "user", "content": question(task)}]
    right_call = False
    with agl.agent("clerk"):
        reply = openai_client.chat.completions.create(model=llm.model, messages=messages, tools=TOOLS, max_tokens=48)
        message = reply.choices[0].message
        if message.tool_calls:
            call = message.tool_calls[0]
            tool_span = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "stock"}
            with agl.get_tracer().start_as_current_span("execute_tool stock", attributes=tool_span):
                try:
                    arguments = json.loads(call.function.arguments)
                    result = str(stock(str(arguments["item"]), str(arguments["warehouse"])))
                    right_call = (arguments["item"].lower(), arguments["warehouse"].lower()) == (
                        task["item"].lower(), task["warehouse"].lower())  # fmt: skip
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    result = f"error: {exc}"
            messages += [
                {"role": "assistant", "content": message.content or "",
                 "tool_calls": [{"id": call.id, "type": "function",
                                 "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                {"role": "tool", "tool_call_id": call.id, "content": result},
            ]  # fmt: skip
            reply = openai_client.chat.completions.create(model=llm.model, messages=messages, tools=TOOLS,
                                                          max_tokens=24)  # fmt: skip
    answer = reply.choices[0].message.content or ""
    if str(stock(task["item"], task["warehouse"])) in re.findall(r"\d+", answer):
        return 1.0
    return 0.3 if right_call else 0.0
