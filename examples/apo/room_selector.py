"""The room-selector agent of Agent Lightning's APO tutorial ("Train the first agent"), for lightning-otel.

The agent books a meeting room: it formats the task into its prompt template (the resource APO optimises), asks
the model, which calls the `get_rooms_and_availability` tool, then asks again for the final choice; an LLM judge
grades the answer against the expected room (0-1). The model and the judge are any OpenAI-compatible endpoint:
`OpenAI()` reads OPENAI_BASE_URL and OPENAI_API_KEY; ROOM_SELECTOR_MODEL and ROOM_SELECTOR_JUDGE_MODEL name the
models (defaults: the tutorial's gpt-4.1-nano and gpt-4.1-mini).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from openai import OpenAI
from pydantic import BaseModel, Field

import lightning_otel as agl

HERE = Path(__file__).resolve().parent
MODEL = os.environ.get("ROOM_SELECTOR_MODEL", "gpt-4.1-nano")
JUDGE_MODEL = os.environ.get("ROOM_SELECTOR_JUDGE_MODEL", "gpt-4.1-mini")

# id, capacity, equipment, accessible, distance (m), bookings on the day: (start HH:MM, minutes)
ROOMS: list[dict[str, Any]] = [
    {"id": "Birch", "capacity": 4, "equipment": ["tv"], "accessible": True, "distance_m": 10,
     "booked": [("09:00", 60)]},
    {"id": "Cedar", "capacity": 6, "equipment": ["projector", "whiteboard"], "accessible": False, "distance_m": 15,
     "booked": [("13:00", 30)]},
    {"id": "Maple", "capacity": 8, "equipment": ["projector", "whiteboard", "confphone"], "accessible": True,
     "distance_m": 30, "booked": []},
    {"id": "Aspen", "capacity": 6, "equipment": ["whiteboard"], "accessible": True, "distance_m": 8,
     "booked": [("10:00", 90)]},
    {"id": "Spruce", "capacity": 12, "equipment": ["projector", "ledwall", "confphone"], "accessible": True,
     "distance_m": 40, "booked": [("15:00", 60)]},
]  # fmt: skip

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_rooms_and_availability",
            "description": "Meeting rooms with capacity, equipment, accessibility, distance and whether each is free.",
            "parameters": {
                "type": "object",
                "properties": {
                    "date": {"type": "string", "description": "YYYY-MM-DD"},
                    "time": {"type": "string", "description": "HH:MM, 24 h"},
                    "duration_min": {"type": "integer"},
                },
                "required": ["date", "time", "duration_min"],
            },
        },
    }
]


def prompt_template_baseline() -> agl.PromptTemplate:
    return agl.PromptTemplate(
        template="Find a room on {date} at {time} for {duration_min} minutes, {attendees} attendees. "
        "Needs: {needs}. Accessible required: {accessible_required}",
        engine="f-string",
    )


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def get_rooms_and_availability(date: str, time: str, duration_min: int) -> dict[str, Any]:
    start, end = _minutes(time), _minutes(time) + int(duration_min)
    rooms = []
    for room in ROOMS:
        free = all(end <= _minutes(b) or start >= _minutes(b) + length for b, length in room["booked"])
        rooms.append({key: value for key, value in room.items() if key != "booked"} | {"free": free})
    return {"date": date, "rooms": rooms}


def best_room(requirement: dict[str, Any], rooms: list[dict[str, Any]]) -> str:
    """The room a careful assistant picks: free, large enough, all the equipment, accessible when asked; then the
    least spare capacity, the least extra equipment, the shortest walk. "No Room" when none fits."""
    fits = [room for room in rooms if room["free"] and room["capacity"] >= requirement["attendees"]
            and set(requirement["needs"]) <= set(room["equipment"])
            and (room["accessible"] or not requirement["accessible_required"])]  # fmt: skip
    if not fits:
        return "No Room"

    def slack(room: dict[str, Any]) -> tuple[int, int, int]:
        extra = len(room["equipment"]) - len(requirement["needs"])
        return room["capacity"] - requirement["attendees"], extra, room["distance_m"]

    return min(fits, key=slack)["id"]


class JudgeResponse(BaseModel):
    reason: str = Field(description="Why, in at most 100 characters.")
    score: float = Field(description="How well the answer matches the expected room, 0 to 1. Be strict.")


def grade(client: OpenAI, final_message: str | None, expected_choice: str) -> float:
    judge = client.chat.completions.parse(
        model=JUDGE_MODEL,
        messages=[{"role": "user", "content": (
            "You are a strict grader of a meeting-room choice.\n"
            f"Task output:\n{final_message}\n\nExpected room:\n{expected_choice}\n\n"
            "Score the match from 0 to 1; a partly right answer may score in between.")}],
        response_format=JudgeResponse,
        temperature=0.0,
    )  # fmt: skip
    parsed = judge.choices[0].message.parsed
    return float(parsed.score) if parsed is not None else 0.0


def choose_room(client: OpenAI, model: str, prompt: str) -> str | None:
    """The agent's two calls: the prompt with the tool offered, then, when it called the tool, its answer read."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a scheduling assistant."},
        {"role": "user", "content": prompt},
    ]
    reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, tool_choice="auto",
                                           temperature=0.0).choices[0].message  # fmt: skip
    if not reply.tool_calls:
        return reply.content
    messages.append({"role": "assistant", "content": reply.content, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for c in reply.tool_calls]})  # fmt: skip
    for call in reply.tool_calls:
        try:
            result: Any = get_rooms_and_availability(**json.loads(call.function.arguments))
        except Exception as exc:  # a bad call is the model's mistake: it reads the error and the reward says so
            result = {"error": str(exc)}
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    return client.chat.completions.create(model=model, messages=messages, temperature=0.0).choices[0].message.content


@agl.rollout
def room_selector(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    client = OpenAI()
    final = choose_room(client, MODEL, prompt_template.format(**task["task_input"]))
    return grade(client, final, task["expected_choice"])


def load_room_tasks(path: Path = HERE / "room_tasks.jsonl") -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
