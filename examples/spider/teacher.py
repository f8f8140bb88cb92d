"""A scripted teacher for CPU runs: the built-in OpenAI-compatible test server answering the SQL agent's prompts
with the gold query (write/rewrite) and an honest verdict on the execution result (check).

Where a real model is at hand, any OpenAI-compatible endpoint is the teacher instead (`--teacher-url`); this one
exists so that the warm start works offline. It reads the question from the prompt the agent sent, exactly as a
model would, and looks the gold query up; it never sees anything the agent did not send.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from sql_graph import CORRECT, INCORRECT

_QUESTION = re.compile(r"^Question: (.*?)$", re.MULTILINE)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    return content if isinstance(content, str) else "".join(str(part.get("text", "")) for part in content)


def scripted_teacher(tasks: Iterable[dict[str, Any]]) -> Callable[[dict[str, Any]], str]:
    """A reply function for `OpenAITestServer(replies=...)` that knows the gold query of every task given."""
    gold = {task["question"]: task["query"] for task in tasks}

    def reply(body: dict[str, Any]) -> str:
        messages = body.get("messages") or []
        system, user = _text(messages[0]), _text(messages[-1])
        if system.startswith("You are a SQL expert"):  # check_query
            return INCORRECT if "Execution result:\nError" in user else CORRECT
        found = _QUESTION.search(user)
        query = gold.get(found.group(1).strip()) if found else None
        return f"```sqlite\n{query or 'SELECT 1'}\n```"  # write_query, rewrite_query

    return reply
