"""The APO tutorial's room selector, for the APO benchmarks: its strict grade, and a warm start on the tool's format
(issue 70: does APO find a better prompt once the agent can use its tool?).

The warm start: drills in the tutorial's task format (generated; none is one of the tutorial's tasks), answered by
a scripted teacher that calls `get_rooms_and_availability` with the task's date, time and duration, then names the
room the tutorial's selection rule picks (`best_room`); SFT on the calls of the drills graded right. A drill is the
tutorial agent's two calls as `room_selector` makes them (its system turn, its seed prompt, its tools), graded here
by the strict rule: the tutorial's agent also sends its judge a call, which is not one to learn from.
"""

from __future__ import annotations

import ast
import json
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning_otel as agl
from lightning_otel.agent_api.script_folder import import_from_folder
from lightning_otel.testing import OpenAITestServer, Reply, ToolCall

ROOT = Path(__file__).resolve().parents[1]
(room_selector,) = import_from_folder(ROOT / "examples" / "apo", "room_selector")
ROOMS = room_selector.ROOMS
# the seed prompt, as `prompt_template_baseline()` fills it
_SEED_PROMPT = re.compile(r"Find a room on (\S+) at (\S+) for (\d+) minutes, (\d+) attendees\. Needs: (\[.*?\])\. "
                          r"Accessible required: (True|False)")  # fmt: skip


def strict_score(output: str, expected: str) -> float:
    """1.0 when the output names the expected room and no other; for "No Room", when it names none and says so."""
    named = {room["id"] for room in ROOMS if re.search(rf"\b{room['id']}\b", output, re.IGNORECASE)}
    if expected == "No Room":
        return float(not named and bool(re.search(r"\bno (suitable )?room", output, re.IGNORECASE)))
    return float(named == {expected})


def room_drills(count: int, seed: int, avoid: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """`count` tasks in the tutorial's format with the room its rule picks, none with the `task_input` of `avoid`."""
    rng = random.Random(seed)
    equipment = sorted({item for room in ROOMS for item in room["equipment"]})
    taken = [task["task_input"] for task in avoid]
    drills: list[dict[str, Any]] = []
    while len(drills) < count:
        task_input = {
            "date": f"2026-03-{rng.randint(2, 27):02d}", "time": f"{rng.randint(8, 16):02d}:{rng.choice((0, 30)):02d}",
            "duration_min": rng.choice((30, 60, 90)), "attendees": rng.choice((*range(2, 9), rng.randint(1, 12))),
            "needs": sorted(rng.sample(equipment, rng.choice((0, 1, 1, 2)))), "accessible_required": rng.random() < 0.3,
        }  # fmt: skip
        if task_input in taken:
            continue
        taken.append(task_input)
        rooms = room_selector.get_rooms_and_availability(task_input["date"], task_input["time"],
                                                         task_input["duration_min"])["rooms"]  # fmt: skip
        drills.append({"id": f"drill-{len(drills):02d}", "task_input": task_input,
                       "expected_choice": room_selector.best_room(task_input, rooms)})  # fmt: skip
    return drills


def teacher_reply(body: dict[str, Any]) -> Reply:
    """The scripted teacher: the tool call the seed prompt asks for, then the room the rule picks from its result."""
    messages = body["messages"]
    asked = _SEED_PROMPT.search(next(str(m["content"]) for m in messages if m["role"] == "user"))
    if asked is None:
        raise ValueError("the teacher reads the seed prompt only")
    date, time, duration, attendees, needs, accessible = asked.groups()
    if messages[-1]["role"] != "tool":
        arguments = {"date": date, "time": time, "duration_min": int(duration)}
        return Reply(tool_calls=[ToolCall("get_rooms_and_availability", json.dumps(arguments))])
    needed = {"attendees": int(attendees), "needs": ast.literal_eval(needs)}
    needed["accessible_required"] = accessible == "True"
    room = room_selector.best_room(needed, json.loads(messages[-1]["content"])["rooms"])
    return Reply(content="No room fits." if room == "No Room" else room)


@agl.rollout
def room_drill(task: dict[str, Any], llm: agl.LLM) -> float:
    """The tutorial agent's two calls on a drill (the seed prompt, its tools), graded by the strict rule."""
    from openai import OpenAI

    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused")
    prompt = room_selector.prompt_template_baseline().format(**task["task_input"])
    return strict_score(room_selector.choose_room(client, llm.model, prompt) or "", task["expected_choice"])


def warm_start(model: Path, drills: Sequence[dict[str, Any]], output: Path, *, seed: int, epochs: float = 2.0,
               learning_rate: float = 1e-4) -> agl.TrainingResult:  # fmt: skip
    """SFT of `model` (a folder whose template renders tools) on the drills the teacher answered right, to `output`
    (the recipe's SFT rate for SmolLM2, `sft` in docs/models.md)."""
    with OpenAITestServer(replies=teacher_reply) as teacher:
        options = agl.TrainingOptions(schedule=agl.Schedule(batch_size=len(drills), group_size=1),
                                      trackers=agl.Trackers(logger=()))  # fmt: skip
        sft = agl.SFT(model, output, options, min_reward=1.0, epochs=epochs, learning_rate=learning_rate, batch_size=8,
                      seed=seed)  # fmt: skip
        llm = agl.LLM(teacher.base_url, "scripted-teacher")
        trainer = agl.Trainer(n_runners=2, algorithm=sft, initial_resources={"main_llm": llm}, progress=False)
        return trainer.fit(room_drill, list(drills))
