"""A store with known rollouts, built through a real collector: queued, claimed and completed on its queue API, their
spans posted as OTLP/HTTP protobuf, so an export can be checked against exactly what was put in."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from lightning_otel.collector.client import Client
from lightning_otel.collector.server import EmbeddedCollector
from lightning_otel.testing.otlp_factory import make_request, make_span

RUN_ID = "run-export"
# The tools the `write` calls offered, in the conventions' shape (the `check` calls offered none).
WRITE_TOOLS = [{"type": "function", "name": "lookup", "description": "Look a word up",
                "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}]  # fmt: skip


@dataclass
class BuiltCall:
    agent: str
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    response_logprobs: list[float]
    input_messages: list[dict[str, Any]]
    reply: dict[str, Any]


@dataclass
class BuiltRollout:
    rollout_id: str
    group_id: str
    task_id: str
    step: int
    reward: float
    calls: list[BuiltCall] = field(default_factory=list)


def _message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def build_store(
    path: Path,
    *,
    groups: int,
    group_size: int = 4,
    extra_spans: int = 2,
    prompt_len: int = 24,
    response_len: int = 8,
    steps: int = 2,
    seed: int = 0,
) -> list[BuiltRollout]:
    """`groups` tasks x `group_size` rollouts over `steps` steps; each rollout: an agent span, a `write` call, a
    `check` call, a reward, `extra_spans` tool spans (so spans per rollout = 4 + extra_spans). Within a group the
    `write` calls share their prompt (the task) and the `check` calls' prompts differ (they include the reply)."""
    rng = random.Random(seed)
    collector = EmbeddedCollector.on_sqlite_file(path, fresh=True)
    addresses = collector.start()
    built: list[BuiltRollout] = []
    try:
        with Client(addresses.query) as client, httpx.Client(timeout=60) as http:
            specs = []
            for g in range(groups):
                step = g % steps
                task_id = f"task-{g}"
                group_id = f"b{step}/{task_id}"
                for i in range(group_size):
                    rollout_id = f"ro-{g:06d}-{i}"
                    specs.append({
                        "rollout_id": rollout_id, "input": {"question": f"q{g}", "n": g}, "task_id": task_id,
                        "group_id": group_id, "metadata": {"run_id": RUN_ID, "step": step, "agent_match": "write"},
                    })  # fmt: skip
                    built.append(BuiltRollout(rollout_id, group_id, task_id, step, float(rng.randint(0, 3))))
            for start in range(0, len(specs), 5_000):
                client.enqueue(specs[start : start + 5_000])
            attempts: dict[str, str] = {}
            while len(attempts) < len(specs):
                for attempt in client.claim("builder", max_attempts=1_000, wait_s=1)["attempts"]:
                    attempts[attempt["rollout_id"]] = attempt["attempt_id"]
            prompt_of_task: dict[str, list[int]] = {}
            spans = []
            for n, rollout in enumerate(built):
                trace, attempt = n + 1, attempts[rollout.rollout_id]
                task_prompt = prompt_of_task.setdefault(
                    rollout.task_id, [rng.randrange(0, 151_000) for _ in range(prompt_len)]
                )
                common = {"rollout": rollout.rollout_id, "attempt": attempt}
                spans.append(make_span(trace, 1, name="invoke_agent solver", operation="invoke_agent", agent="solver",
                                       duration_us=10_000, **common))  # fmt: skip
                for index, agent in enumerate(("write", "check")):
                    response = [rng.randrange(0, 151_000) for _ in range(response_len)]
                    prompt = task_prompt if agent == "write" else task_prompt + rollout.calls[0].response_token_ids
                    text = f"{agent} {rollout.rollout_id}"
                    call = BuiltCall(agent, list(prompt), response, [-rng.random() for _ in response],
                                     [_message("user", f"question {rollout.task_id}")] if agent == "write"
                                     else [_message("user", f"check {text}")],
                                     _message("assistant", text))  # fmt: skip
                    rollout.calls.append(call)
                    spans.append(make_span(trace, 2 + index, parent=1, name=f"chat {agent}", operation="chat",
                                           agent=agent, start_us=100 + 1000 * index, kind=3, **common, attributes={
                        "agl.llm.prompt_token_ids": call.prompt_token_ids,
                        "agl.llm.response_token_ids": call.response_token_ids,
                        "agl.llm.response_logprobs": call.response_logprobs,
                        "gen_ai.response.id": f"resp-{rollout.rollout_id}-{index}",
                        "gen_ai.input.messages": json.dumps(call.input_messages),
                        "gen_ai.output.messages": json.dumps([call.reply]),
                        **({"gen_ai.tool.definitions": json.dumps(WRITE_TOOLS)} if agent == "write" else {}),
                    }))  # fmt: skip
                spans.append(make_span(trace, 4, parent=1, name="agl.reward", start_us=5000, **common,
                                       attributes={"agl.reward.value": rollout.reward}))  # fmt: skip
                for extra in range(extra_spans):
                    spans.append(make_span(trace, 5 + extra, parent=1, name="execute_tool lookup",
                                           start_us=6000 + extra, **common))  # fmt: skip
                if len(spans) >= 2_000:
                    _post(http, addresses.otlp_http, spans)
                    spans = []
            if spans:
                _post(http, addresses.otlp_http, spans)
            reports = [{"rollout_id": r.rollout_id, "attempt_id": attempts[r.rollout_id], "status": "succeeded",
                        "reward": r.reward} for r in built]  # fmt: skip
            for start in range(0, len(reports), 5_000):
                client.complete_many(reports[start : start + 5_000])
    finally:
        collector.stop()
    return built


def _post(http: httpx.Client, otlp_http: str, spans: list) -> None:
    body = make_request(spans, service="export-test").SerializeToString()
    response = http.post(f"{otlp_http}/v1/traces", content=body, headers={"content-type": "application/x-protobuf"})
    response.raise_for_status()
