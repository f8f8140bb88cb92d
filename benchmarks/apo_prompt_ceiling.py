"""What a prompt can do for SmolLM2 on the room-selector tutorial (examples/apo): the seed prompt and three edits a
capable editor might write, each keeping the template's six placeholders, run on the 8 validation tasks. APO on
SmolLM2 (`apo_room_selector.py`) proposed no edit that kept them; this says whether an edit that did could have
scored, i.e. whether the figure is the editor's limit or the agent's.

    python -m benchmarks.apo_prompt_ceiling --out runs/apo_ceiling.json   # SmolLM2, about 9 min on 2 cores
    python -m benchmarks.apo_prompt_ceiling --warm-start 32               # the agent warm-started on the tool first
    python -m benchmarks.apo_prompt_ceiling --quick                       # the tiny model, 1 task a prompt (tests)

The agent, its endpoint and the judge are `apo_room_selector.py`'s: the tutorial's `room_selector` rollout unchanged
(greedy, as the tutorial samples it, so one run is the measurement), SmolLM2 served with a template for tools and
the hermes parser, replies of at most `--max-tokens`, the scripted strict grader. Reported per prompt: the strict
score, how many rollouts called the tool (a second request carried its answer), and how many final answers named
a room at all, and how many distinct final answers the prompt's rollouts gave (1: the same answer to every task,
whatever the tool said); each answer is kept with the room the task expects.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import lightning_otel as agl
from benchmarks._seeded_runs import standard_error
from benchmarks.apo_room_selector import AGENT, JUDGE, JUDGE_PROMPT, router, warm_agent
from lightning_otel.agent_api.script_folder import import_from_folder
from lightning_otel.serving.cpu_replica import serve_folder
from lightning_otel.testing import OpenAITestServer
from lightning_otel.testing.tiny_model import model_or_tiny

ROOT = Path(__file__).resolve().parents[1]
(model_with_tools,) = import_from_folder(ROOT / "examples" / "calculator", "model_with_tools")
room_selector_module, room_selector_apo = import_from_folder(ROOT / "examples" / "apo", "room_selector",
                                                             "room_selector_apo")  # fmt: skip
with_tools_template = model_with_tools.with_tools_template
ROOMS, room_selector = room_selector_module.ROOMS, room_selector_module.room_selector
load_train_val_dataset = room_selector_apo.load_train_val_dataset

SEED = ("Find a room on {date} at {time} for {duration_min} minutes, {attendees} attendees. Needs: {needs}. "
        "Accessible required: {accessible_required}")  # fmt: skip
ANSWER = " Then answer with the name of the room only, or 'No room' when none fits."
RULE = (" Pick a room that is free, holds the attendees, has every need, and is accessible when required; among those,"
        " the one with the fewest spare seats.")  # fmt: skip
SHOW_CALL = (
    "\nFirst call the tool exactly like this:\n<tool_call>\n"
    '{{"name": "get_rooms_and_availability", "arguments": {{"date": "{date}", "time": "{time}", '
    '"duration_min": {duration_min}}}}}\n</tool_call>'
)
ROOM_NAME = re.compile(r"\b(" + "|".join(room["id"] for room in ROOMS) + r")\b")
PROMPTS = {
    "seed": SEED,
    "ask for the tool": SEED + ". First call get_rooms_and_availability for this date, time and duration." + ANSWER,
    "show the call": SEED + "." + SHOW_CALL + ANSWER,
    "show the call and the rule": SEED + "." + SHOW_CALL + RULE + ANSWER,
}


def one_prompt(name: str, template: str, tasks: list[dict[str, Any]], api: Any, work: Path) -> dict[str, Any]:
    first = len(api.requests)
    prompt = agl.PromptTemplate(template=template, engine="f-string")
    trainer = agl.Trainer(n_runners=2, initial_resources={"prompt_template": prompt})
    with agl.quiet(work / (re.sub(r"\W+", "-", name) + ".log")):
        result = trainer.dev(room_selector, val_dataset=tasks, print_spans=False)
    rewards = [reward for batch in result.val for reward in batch.rewards().values() if reward is not None]
    bodies = [request.body for request in api.requests[first:]]
    agent_requests = [body for body in bodies if body.get("model") == AGENT]
    finals = [str(body["messages"][-1]["content"]) for body in bodies if body.get("model") == JUDGE]
    answers = [JUDGE_PROMPT.search(text) for text in finals]
    return {
        "prompt": name, "template": template, "rollouts": len(rewards),
        "score": sum(rewards) / len(rewards) if rewards else float("nan"),
        "called_tool": sum(any(m.get("role") == "tool" for m in request["messages"]) for request in agent_requests),
        "named_a_room": sum(bool(found and ROOM_NAME.search(found.group(1)))
                            for found in answers),
        "distinct_answers": len({found.group(1).strip() for found in answers if found}),
        "answers": [{"answer": found.group(1)[:200], "expected": found.group(2)} if found else None
                    for found in answers],
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("tiny", "smollm2"), default="smollm2")
    parser.add_argument("--max-tokens", type=int, default=256, help="the longest reply SmolLM2 gives any request")
    parser.add_argument("--out", type=Path, help="write every prompt's numbers here (JSON)")
    parser.add_argument("--warm-start", type=int, default=0, metavar="DRILLS",
                        help="the agent's model warm-started on this many drills (apo_room_selector's)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="the tiny model, one task a prompt: that it runs (tests)")
    args = parser.parse_args()
    tasks = load_train_val_dataset()[1]  # the tutorial driver's validation tasks
    if args.quick:
        args.model, args.max_tokens, tasks = "tiny", 16, tasks[:1]
    runs = []
    with tempfile.TemporaryDirectory(prefix="agl-apo-ceiling-") as scratch:
        work = Path(scratch)
        folder = with_tools_template(model_or_tiny(args.model, work, seed=0), work)
        if args.warm_start:  # every model name here is the agent's: the warm-started model serves them all
            folder, warmed = warm_agent(folder, 0, args, work)
            print(f"warm start: {warmed['examples']:.0f} examples from {warmed['drills']} drills in "
                  f"{warmed['seconds']:.0f} s", flush=True)  # fmt: skip
        with serve_folder(folder, seed=0) as replica, OpenAITestServer(replies=router(replica, args.max_tokens)) as api:
            # the runner processes inherit these, as the tutorial's reader sets them for room_selector.py
            os.environ.update(OPENAI_BASE_URL=api.base_url, OPENAI_API_KEY="unused", ROOM_SELECTOR_MODEL=AGENT,
                              ROOM_SELECTOR_JUDGE_MODEL=JUDGE)  # fmt: skip
            for name, template in PROMPTS.items():
                runs.append(one_prompt(name, template, tasks, api, work))
                print(json.dumps(runs[-1]), flush=True)
    print(f"{'prompt':<28} {'strict score':>16} {'called the tool':>16} {'named a room':>13} {'distinct answers':>17}")
    for run in runs:
        count = run["rollouts"]
        print(f"{run['prompt']:<28} {run['score']:>8.3f} +- {standard_error(run['score'], count):.3f} "
              f"{run['called_tool']:>10} of {count} {run['named_a_room']:>7} of {count} "
              f"{run['distinct_answers']:>17}")  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(runs, indent=1))
    if any(run["rollouts"] != len(tasks) for run in runs):
        print("not a measurement: a prompt's rollout left no reward", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
