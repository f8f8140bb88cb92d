"""The agent as an HTTP service: verl's agent_lightning_like recipe, on the OpenAI Agents SDK.

    uvicorn agent_server:app --port 8765                                   # bare: nothing of lightning-otel in it
    lightning-otel-run --endpoint http://TRAINER:4318 -- uvicorn agent_server:app --port 8765   # instrumented

`POST /chat` takes what `lightning_otel.HttpAgent` sends: `{"task": {"question", "answer"}, "rollout_id",
"attempt_id", "llm": {"base_url", "model", "api_key", "sampling_parameters"}}` and answers `{"reward": r, "answer":
...}`. The agent ("Assistant") solves the arithmetic problem and calls its `calc_gsm8k_reward` tool with the answer;
when the model never calls the tool, the reward is computed from its final text. The policy's address comes from
the request's `llm.base_url` (the rollout is in that path); a request without one uses the address the trainer
wrote to `$LLM_SERVER_NOTIFY_FILE` (the recipe's way) and forwards the request's trace headers, which carry the
rollout. Every LLM request names the agent with the `x-agl-agent-name` header, so the trainer's `agent_match`
selects its calls whether or not the service is instrumented. This file imports nothing of lightning-otel.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    AgentsException,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from fastapi import FastAPI, Request
from openai import AsyncOpenAI
from pydantic import BaseModel, Field

AGENT_NAME = "Assistant"
AGENT_NAME_HEADER = "x-agl-agent-name"  # the gateway records it as gen_ai.agent.name
INSTRUCTIONS = (
    "You are a careful math tutor. Solve the problem step by step, call calc_gsm8k_reward with your final answer "
    "as a number, then end with '#### <answer>'."
)
TRACE_HEADERS = ("traceparent", "tracestate", "baggage")

if os.environ.get("AGL_RUN_ACTIVE") != "1":
    # Bare: the SDK would upload its own traces to OpenAI. Under lightning-otel-run they become OpenTelemetry spans.
    set_tracing_disabled(True)


@dataclass
class UserContext:
    ground_truth: str
    reward: float | None = None


def gsm8k_reward(answer: str, ground_truth: str) -> float:
    """1.0 when the answer's final number (after '####' if present) equals the ground truth, else 0.0."""
    text = answer.split("####")[-1]
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text.replace(",", ""))
    if not numbers:
        return 0.0
    try:
        return 1.0 if float(numbers[-1]) == float(ground_truth) else 0.0
    except ValueError:
        return 0.0


def partial_credit(answer: str, ground_truth: str) -> float:
    """GSM8K's reward, or, short of it, up to 0.5 for a final number close to the answer and a little for writing
    at all (by length): a tiny random policy never answers right, so with the 0/1 reward alone every attempt scores
    0, no group has a signal and no GRPO step can train. Tasks ask for it with `"partial_credit": true` (the
    trainer's --ci-fast does); the tutorial's reward is `gsm8k_reward`."""
    exact = gsm8k_reward(answer, ground_truth)
    if exact:
        return exact
    numbers = re.findall(r"-?\d+(?:\.\d+)?", answer.split("####")[-1].replace(",", ""))
    try:
        target = float(ground_truth)
        if numbers:
            return 0.25 + 0.25 / (1.0 + abs(float(numbers[-1]) - target) / max(abs(target), 1.0))
    except ValueError:
        pass
    return 0.2 * len(answer) / (len(answer) + 40)


@function_tool
def calc_gsm8k_reward(ctx: RunContextWrapper[UserContext], answer: str) -> str:
    """Check a final answer to the problem; returns the reward (1.0 correct, 0.0 wrong)."""
    ctx.context.reward = gsm8k_reward(answer, ctx.context.ground_truth)
    return f"reward: {ctx.context.reward}"


class PolicyInfo(BaseModel):
    base_url: str | None = None
    model: str = "default"
    api_key: str | None = None
    sampling_parameters: dict[str, Any] = Field(default_factory=dict)


class ChatRequest(BaseModel):
    task: dict[str, Any]
    rollout_id: str | None = None
    attempt_id: str | None = None
    llm: PolicyInfo | None = None
    max_turns: int = 3


def notified_policy() -> PolicyInfo:
    """The policy the trainer announced in its notify file (rewritten when the policy moves)."""
    path = os.environ.get("LLM_SERVER_NOTIFY_FILE")
    if not path:
        raise RuntimeError("the request has no llm.base_url and LLM_SERVER_NOTIFY_FILE is not set")
    record = json.loads(Path(path).read_text())
    return PolicyInfo(base_url=record["base_url"], model=record["model"], api_key=record.get("api_key"))


def model_settings(policy: PolicyInfo, headers: dict[str, str]) -> ModelSettings:
    sampling = policy.sampling_parameters
    return ModelSettings(
        temperature=sampling.get("temperature"),
        top_p=sampling.get("top_p"),
        max_tokens=sampling.get("max_tokens"),
        extra_headers=headers,
    )


app = FastAPI(title="agent service")


@app.get("/healthz")
async def healthz() -> dict[str, bool]:
    return {"ok": True}


@app.post("/chat")
async def chat(request: ChatRequest, http: Request) -> dict[str, Any]:
    policy = request.llm if request.llm and request.llm.base_url else notified_policy()
    headers = {AGENT_NAME_HEADER: AGENT_NAME}
    if not (request.llm and request.llm.base_url):  # the rollout is not in the URL: carry it in the headers
        headers.update({key: value for key in TRACE_HEADERS if (value := http.headers.get(key))})
    client = AsyncOpenAI(base_url=policy.base_url, api_key=policy.api_key or "EMPTY", max_retries=0)
    agent = Agent[UserContext](
        name=AGENT_NAME,
        instructions=INSTRUCTIONS,
        tools=[calc_gsm8k_reward],
        model=OpenAIChatCompletionsModel(model=policy.model, openai_client=client),
        model_settings=model_settings(policy, headers),
    )
    context = UserContext(ground_truth=str(request.task["answer"]))
    try:
        result = await Runner.run(agent, request.task["question"], context=context, max_turns=request.max_turns)
        final = str(result.final_output)
    except AgentsException as exc:  # the policy broke the tool protocol or ran out of turns: a wrong answer
        return {"reward": 0.0, "answer": None, "error": f"{type(exc).__name__}: {exc}"}
    reward = context.reward if context.reward is not None else gsm8k_reward(final, context.ground_truth)
    if request.task.get("partial_credit") and not reward:
        reward = partial_credit(final, context.ground_truth)
    return {"reward": reward, "answer": final}
