"""An agent the SmolLM2 tool tests run in runner processes (importable by name): two calls that offer a tool, the
second after the history a tool-using agent sends back (its call, the tool's answer)."""

from __future__ import annotations

import json
from typing import Any

from openai import OpenAI

import lightning_otel as agl

TOOLS = [{"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression, such as 17 * 24",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
}}]  # fmt: skip


@agl.rollout
def tool_turns_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", max_retries=3)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Use the tool."},
                                      {"role": "user", "content": task["question"]}]  # fmt: skip
    client.chat.completions.create(model=llm.model, messages=messages, tools=TOOLS, max_tokens=8)
    call = {"id": "c1", "type": "function",
            "function": {"name": "calculate", "arguments": json.dumps({"expression": task["expression"]})}}  # fmt: skip
    messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": "c1", "content": task["result"]}]  # fmt: skip
    client.chat.completions.create(model=llm.model, messages=messages, tools=TOOLS, max_tokens=8)
    return 1.0
