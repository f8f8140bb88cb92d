"""A scripted model for dry runs without a real one: the built-in OpenAI-compatible test server answering the ADK
SQL agent like a good model would. The writer tries the gold query with run_sql, then answers with it; the checker
calls exit_loop when the execution result is not an error. It reads only what the agent sent (the question in the
user message, the tool result, which agent's instruction it is), and looks the gold query up by the question.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from adk_agent import CHECKER_INSTRUCTION

from lightning_otel.testing import Reply, ToolCall

_CHECKER_OPENING = CHECKER_INSTRUCTION.split("\n", 1)[0]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    return content if isinstance(content, str) else "".join(str(part.get("text", "")) for part in content)


def scripted_teacher(tasks: Iterable[dict[str, Any]]) -> Callable[[dict[str, Any]], str | Reply]:
    """A reply function for `OpenAITestServer(replies=...)` that knows the gold query of every task given."""
    gold = {task["question"].strip(): task["query"] for task in tasks}

    def reply(body: dict[str, Any]) -> str | Reply:
        messages = body.get("messages") or []
        if messages and _text(messages[0]).startswith(_CHECKER_OPENING):
            wrong = "Error:" in _text(messages[0]).rsplit("## Execution result ##", 1)[-1]
            return "The query fails to run." if wrong else Reply(tool_calls=[ToolCall("exit_loop", "{}")])
        asked = [_text(m).strip() for m in messages if m.get("role") == "user"]
        query = next((gold[text] for text in asked if text in gold), "SELECT 1")
        if messages and messages[-1].get("role") == "tool":  # it tried the query: answer with it
            return f"```sql\n{query}\n```"
        return Reply(tool_calls=[ToolCall("run_sql", json.dumps({"query": query}))])

    return reply
