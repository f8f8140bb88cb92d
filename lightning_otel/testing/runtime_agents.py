"""Agents the trainer-runtime tests and benchmarks run in runner processes (importable, so runners can load them)."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

import openai

from lightning_otel.agent_api.failures import PolicyError
from lightning_otel.agent_api.function_agent import rollout
from lightning_otel.agent_api.lit_agent import LitAgent, Rollout
from lightning_otel.agent_api.resources import LLM
from lightning_otel.capture.agent_naming import agent
from lightning_otel.capture.reward import emit_reward
from lightning_otel.capture.setup import flush


@functools.cache
def _client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)


@functools.cache
def _async_client(base_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="test", max_retries=0)


def ask(resources: dict[str, Any], agent_name: str, text: str) -> Any:
    llm = resources["main_llm"]
    with agent(agent_name):
        return _client(llm.endpoint).chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": text}]
        )


@rollout
def flaky_agent(task: dict[str, Any], resources: dict[str, Any], rollout: Rollout) -> float:
    """Raises on its first `fail_attempts` attempts, then makes one call; reward 1, or the answer's length in
    characters for a task marked `graded` (attempts differ: a signal to learn from)."""
    if rollout.attempt_number <= task.get("fail_attempts", 0):
        raise RuntimeError(f"flaky failure on attempt {rollout.attempt_number}")
    reply = ask(resources, "solo", task["question"])
    return float(len(reply.choices[0].message.content or "")) if task.get("graded") else 1.0


@rollout
def hang_once_agent(task: dict[str, Any], resources: dict[str, Any], rollout: Rollout) -> float:
    """write, then check; on a task marked `hang`, attempt 1 stops after `write` (its spans flushed) and waits to
    be killed, writing its pid where the test can find it."""
    ask(resources, "write", f"Write a SQL query: {task['question']}")
    if task.get("hang") and rollout.attempt_number == 1:
        flush()  # the killed attempt's first call is in the store: it must not become a sample
        # written whole, then renamed: the test polls for the file and must never read it half-written
        partial = Path(task["pid_file"] + ".partial")
        partial.write_text(str(os.getpid()))
        partial.rename(task["pid_file"])
        time.sleep(120)
    ask(resources, "check", f"Check this query for: {task['question']}")
    return 1.0


class EmittingAgent(LitAgent):
    """Async; rewards the writer's call by response id and the checker's by position; may also return a value."""

    async def rollout(self, task: Any, resources: dict[str, Any], rollout: Rollout) -> float | None:
        llm = resources["main_llm"]
        client = _async_client(llm.endpoint)
        with agent("write"):
            draft = await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": task["question"]}]
            )
        with agent("check"):
            await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": "check"}])
        emit_reward(0.25)  # the latest unrewarded call: check
        emit_reward(0.75, response_id=draft.id)  # the write call, by id
        return 1.0 if task.get("also_return") else None


emitting_agent = EmittingAgent()


@rollout
async def four_calls(task: dict[str, Any], resources: dict[str, Any]) -> float:
    """The benchmark's agent: four sequential calls by two agents (async client)."""
    llm = resources["main_llm"]
    client = _async_client(llm.endpoint)
    for index in range(4):
        with agent("write" if index % 2 == 0 else "check"):
            await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": f"{task['question']} {index}"}]
            )
    return 1.0


@rollout
def litellm_agent(task: dict[str, Any], resources: dict[str, Any]) -> float:
    """A LiteLLM agent (the framework path of the capture tests): a planner then a solver."""
    import litellm

    llm = resources["main_llm"]
    answer = ""
    for name in ("planner", "solver"):
        with agent(name):
            reply = litellm.completion(
                model=f"openai/{llm.model}",
                api_base=llm.endpoint,
                api_key="test",
                messages=[{"role": "user", "content": f"{name}: {task['question']}"}],
            )
            answer = reply.choices[0].message.content or ""
    return 1.0 if task["question"] in answer else 0.0


@rollout
def bare_http_agent(task: dict[str, Any], resources: dict[str, Any], rollout: Rollout) -> float:
    """A client nothing of ours instruments: raw HTTP to the rollout's path on the gateway, its agent named by a
    header. Only the gateway records its calls."""
    import httpx

    url = resources["main_llm"].get_base_url(rollout.rollout_id, rollout.attempt_id) + "/chat/completions"
    for turn in range(2):
        body = {"model": "agl-tiny", "messages": [{"role": "user", "content": f"{task['question']} {turn}"}]}
        httpx.post(url, json=body, headers={"x-agl-agent-name": "solver"}, timeout=30).raise_for_status()
    return 1.0


@rollout
def heap_settled_agent(task: dict[str, Any], resources: dict[str, Any]) -> float:
    """Reward 1.0 when the runner process runs it with its heap settled (`lightning_otel.runner.runner_gc`)."""
    import gc

    ask(resources, "write", task["question"])
    return 1.0 if gc.get_freeze_count() > 0 and gc.get_threshold()[0] >= 5_000 else 0.0


@rollout
def sleeping_agent(task: dict[str, Any]) -> float:
    """Sleeps `sleep_s` (a rollout that holds its runner: a trainer killed meanwhile leaves it running)."""
    time.sleep(float(task.get("sleep_s", 0)))
    return 1.0


@rollout
def swallowing_agent(task: dict[str, Any], resources: dict[str, Any]) -> float:
    """Two calls; a call that fails is swallowed and the agent answers without it (reward: the share that came
    back): what a careless agent does with an outage, and what must not train as a low reward."""
    answered = 0
    for index in range(2):
        try:
            ask(resources, "write", f"{task['question']} {index}")
            answered += 1
        except openai.APIStatusError:
            pass
    return answered / 2


@rollout
def failing_agent(task: dict[str, Any], resources: dict[str, Any]) -> float:
    """One call; then what the task says: `policy` (the answer cannot be used), `loop` (the same call again and
    again, the same answer each time), or nothing (reward 1)."""
    reply = ask(resources, "write", task["question"])
    if task.get("then") == "policy":
        raise PolicyError(f"no SQL in the answer {reply.choices[0].message.content!r}", "no_sql")
    if task.get("then") == "loop":
        for _ in range(100):
            ask(resources, "write", task["question"])
    return 1.0


@rollout
def tool_agent(task: dict[str, Any], resources: dict[str, Any]) -> float:
    """One call, then a tool over HTTP (`task["tool_url"]`): a tool server's 5xx is raised (`raise_for_status`)."""
    import httpx

    ask(resources, "write", task["question"])
    httpx.get(task["tool_url"], timeout=10).raise_for_status()
    return 1.0


@rollout
def anthropic_sdk_agent(task: dict[str, Any], llm: LLM, rollout: Rollout) -> float:
    """An agent on the Anthropic SDK (Messages API): a planner's tool call, then a writer's answer. Only the
    policy gateway records token ids; the SDK's requests carry the traceparent of the agent they were made in."""
    import anthropic

    base_url = llm.get_base_url(rollout.rollout_id, rollout.attempt_id).removesuffix("/v1")
    client = anthropic.Anthropic(base_url=base_url, api_key="test", max_retries=0)
    tools = [{"name": "run_sql", "description": "Run SQL.", "input_schema": {"type": "object"}}]
    conversation: list[Any] = [{"role": "user", "content": task["question"]}]
    with agent("planner"):
        plan = client.messages.create(model=llm.model, max_tokens=32, messages=conversation, tools=tools)
    results = [{"type": "tool_result", "tool_use_id": block.id, "content": "12"}
               for block in plan.content if block.type == "tool_use"]  # fmt: skip
    conversation += [{"role": "assistant", "content": plan.content}, {"role": "user", "content": results}]
    with agent("writer"):
        answer = client.messages.create(model=llm.model, max_tokens=32, messages=conversation, tools=tools)
    return 1.0 if "12" in answer.content[0].text else 0.0
