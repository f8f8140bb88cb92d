"""Scripted models for the APO example's offline test, behind the project's OpenAI-compatible test server: they
stand in for the tutorial's agent model, judge, critique model and edit model. The agent model answers in the
grader's format only when its prompt asks for `final_choice:` (then it picks the room by the example's own rule);
the critique model says so; the edit model appends that instruction to the template it is given. So the test shows
APO's loop (rollouts -> traces -> critique -> edit -> evaluation -> best prompt), not a model's skill.

    python -m tests.examples.apo_scripted_models      # serves them on loopback, prints the base URL
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from lightning_otel.testing import OpenAITestServer, Reply, ToolCall

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "apo"))
from room_selector import best_room

ASK = "Return strictly: final_choice: <ROOM_ID>"
REQUIREMENT = re.compile(r"on (\S+) at (\S+) for (\d+) minutes, (\d+) attendees\. Needs: (.*?)\. "
                         r"Accessible required: (True|False)")  # fmt: skip


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content or "")


def reply(body: dict[str, Any]) -> str | Reply:
    messages = body["messages"]
    first, last = _text(messages[0]), messages[-1]
    if first.startswith("You review the prompt template"):  # the critique (textual gradient)
        return ("The replies never name a room the way the grader reads them. Ask the assistant to end with "
                f"'{ASK}' after checking the rooms.")  # fmt: skip
    if first.startswith("You edit prompt templates"):  # the edit: the template with the instruction appended
        template = re.search(r"<template>\n(.*?)\n</template>", _text(last), re.S).group(1)  # type: ignore[union-attr]
        return template if ASK in template else f"{template} {ASK}"
    if "strict grader" in _text(last):  # the judge
        found = re.search(r"Task output:\n(.*?)\n\nExpected room:\n(.*?)\n", _text(last), re.S)
        output, expected = (found.group(1), found.group(2).strip()) if found else ("", "?")
        score = 1.0 if f"final_choice: {expected}" in output else 0.0
        return json.dumps({"reason": "exact match" if score else "no final_choice for the expected room",
                           "score": score})  # fmt: skip
    user = next(_text(m) for m in messages if m["role"] == "user")  # the agent model
    found = REQUIREMENT.search(user)
    if last["role"] == "user" and found:
        date, time, duration = found.group(1), found.group(2), int(found.group(3))
        arguments = json.dumps({"date": date, "time": time, "duration_min": duration})
        return Reply(tool_calls=[ToolCall("get_rooms_and_availability", arguments)])
    if last["role"] == "tool" and found and ASK in user:
        requirement = {"attendees": int(found.group(4)), "needs": json.loads(found.group(5).replace("'", '"')),
                       "accessible_required": found.group(6) == "True"}  # fmt: skip
        room = best_room(requirement, json.loads(_text(last))["rooms"])
        return f"final_choice: {room}\nreason: the smallest free room with everything asked for"
    return "Several rooms could work for this meeting; any of them should be fine."


def main() -> None:
    with OpenAITestServer(replies=reply) as server:
        print(server.base_url, flush=True)
        import time

        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
