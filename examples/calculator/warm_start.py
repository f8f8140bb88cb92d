"""The warm start: the calculator agent runs against a scripted teacher, and `lightning_otel.SFT` fine-tunes the
policy on the agent's calls in the rollouts that scored 1 (the spider example's recipe).

The teacher reads the arithmetic off the question's words and calls the calculator with it, then answers with the
tool's result. Each kept rollout gives two examples: the call that asks for the tool (its prompt holds the tools the
request offered, so the chat template renders them as a rollout's request does) and the call that reads the answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from calculator_agent import calculator_rollout

import lightning_otel as agl
from lightning_otel.testing import OpenAITestServer, Reply, ToolCall

AGENT_MATCH = "agent"  # LangGraph's node name for the model's calls; the tool runs are the `tools` node's


def teacher_reply(body: dict[str, Any]) -> Reply:
    """A scripted teacher: the calculator call the question asks for, then the tool's answer as the final reply."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(content=f"The answer is {last['content']}.")
    question = last["content"]
    written = re.search(r"(\d+) ([*+-]) (\d+)", question)  # a drill: the expression is in the question
    if written:
        return Reply(tool_calls=[ToolCall("calculate", json.dumps({"expression": written.group(0)}))])
    a, b = (int(n) for n in re.findall(r"\d+", question)[:2])
    sign = "*" if re.search(r"\b(boxes|rows)\b", question) else "-" if "lost" in question else "+"
    return Reply(tool_calls=[ToolCall("calculate", json.dumps({"expression": f"{a} {sign} {b}"}))])


def teacher_warm_start(
    model: Path,
    tasks: Sequence[dict[str, Any]],
    output: Path,
    *,
    seed: int,
    epochs: float,
    learning_rate: float,
    n_runners: int = 2,
) -> agl.TrainingResult:
    """Run the agent on `tasks` against the teacher; fine-tune `model` on its rewarded calls; save to `output`."""
    with OpenAITestServer(replies=teacher_reply) as teacher:
        trainer = agl.Trainer(
            n_runners=n_runners,
            algorithm=agl.SFT(
                model,
                output,
                agl.TrainingOptions(
                    schedule=agl.Schedule(batch_size=len(tasks), group_size=1), trackers=agl.Trackers(logger=())
                ),
                min_reward=1.0,
                epochs=epochs,
                learning_rate=learning_rate,
                batch_size=8,
                seed=seed,
            ),
            adapter={"agent_match": AGENT_MATCH},
            initial_resources={"main_llm": agl.LLM(teacher.base_url, "scripted-teacher")},
            progress=False,
        )
        return trainer.fit(calculator_rollout, list(tasks))
