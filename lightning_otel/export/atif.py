"""Rollouts as ATIF trajectories, and ATIF trajectories as calls again (Harbor's Agent Trajectory Interchange Format,
RFC 0001, written as v1.7).

    trajectory = rollout_trajectory(exported_rollout(record, spans))            # -> a JSON-ready dict
    imported = trajectory_rollout(trajectory)                                   # -> ImportedRollout: calls, identity

One rollout is one trajectory. Its agent is the rollout's (the LitAgent or `@rollout` function the runner ran); the
calls of each other agent the trace names (a LangGraph node, an `agl.agent(...)` block, a harness's sub-agent) form
an embedded sub-agent trajectory (`subagent_trajectories`, `trajectory_id` = `<rollout id>/<agent>`), which a first
dispatch step (`llm_call_count: 0`) references. Within a trajectory the calls' messages become steps in order:
system and user messages their own steps, each call an agent step (its reply, tool calls, and in `metrics` its exact
`prompt_token_ids`, `completion_token_ids` and `logprobs`), tool results the `observation` of the step whose call
they answer. A call whose prompt does not extend the conversation so far (the agent started a fresh context) starts
again with all of its messages, the first marked `extra.lightning_otel.context = "new"`. The task is the first
step (a user step marked `task`), the rollout's identity, reward, status and input are in the trajectory's `extra`,
each call's span, response id, agent, policy version and reward in its step's `extra` (all under `lightning_otel`).
`trajectory_rollout` reads the same back, and reads trajectories other tools wrote: there a step's prompt is the
conversation before it, and a step without token ids is a call without token ids (it trains by its messages).
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_otel import semconv
from lightning_otel.export.rollouts import ExportedCall, ExportedRollout
from lightning_otel.flat_span import Span
from lightning_otel.version import __version__

SCHEMA_VERSION = "ATIF-v1.7"
KEY = "lightning_otel"  # our fields in ATIF's `extra` objects
ROOT_AGENT = "agent"  # a rollout whose runner named no agent


# --- rollout -> trajectory -------------------------------------------------------------------------------------------
def rollout_trajectory(rollout: ExportedRollout) -> dict[str, Any]:
    """The rollout as one ATIF trajectory (a JSON-ready dict; see the module docstring)."""
    spans = rollout.spans
    by_id = {str(span.get("spanId")): span for span in spans}
    root = _rollout_agent(spans) or ROOT_AGENT
    by_agent: dict[str, list[ExportedCall]] = {}
    for call in rollout.calls:
        by_agent.setdefault(call.agent or root, []).append(call)
    subagents = [name for name in by_agent if name != root]
    steps: list[dict[str, Any]] = [{"source": "user", "message": _text(rollout.input), "extra": {KEY: {"task": True}}}]
    if subagents:
        references = [{"subagent_trajectory_ref": [{"trajectory_id": _sub_id(rollout.rollout_id, name)}]}
                      for name in subagents]  # fmt: skip
        steps.append({"source": "agent", "message": "", "llm_call_count": 0, "observation": {"results": references}})
    steps += _conversation(by_agent.get(root, []), by_id)
    trajectory: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "session_id": rollout.run_id or rollout.rollout_id,
        "trajectory_id": rollout.rollout_id,
        "agent": _agent(root, by_agent.get(root, []), by_id),
        "steps": _numbered(steps),
        "final_metrics": _totals(rollout.calls),
        "extra": {KEY: {
            "rollout_id": rollout.rollout_id, "task_id": rollout.task_id, "group_id": rollout.group_id,
            "run_id": rollout.run_id, "step": rollout.step, "mode": rollout.mode, "status": rollout.status,
            "reward": rollout.reward, "input": rollout.input, "policy_version": rollout.policy_version,
            "metadata": rollout.metadata,  # the run's record: its adapter (agent_match) and training settings
        }},
    }  # fmt: skip
    if subagents:
        trajectory["subagent_trajectories"] = [
            {
                "schema_version": SCHEMA_VERSION,
                "session_id": trajectory["session_id"],
                "trajectory_id": _sub_id(rollout.rollout_id, name),
                "agent": _agent(name, by_agent[name], by_id),
                "steps": _numbered(_conversation(by_agent[name], by_id)),
                "final_metrics": _totals(by_agent[name]),
            }
            for name in subagents
        ]
    return trajectory


def _rollout_agent(spans: Sequence[Span]) -> str | None:
    """The runner's name for the rollout's agent, else the agent of the outermost agent span."""
    for span in spans:
        names = (span.get("attributes") or {}).get(semconv.AGL_ROLLOUT_AGENT_NAMES)
        if names:
            return str(names[0] if isinstance(names, (list, tuple)) else names)
    ids = {span.get("spanId") for span in spans}
    for span in sorted(spans, key=lambda s: int(s.get("startTimeUnixNano") or 0)):
        attributes = span.get("attributes") or {}
        if (
            attributes.get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_INVOKE_AGENT
            and span.get("parentSpanId") not in ids
        ):
            return str(attributes.get(semconv.GEN_AI_AGENT_NAME) or "") or None
    return None


def _sub_id(rollout_id: str, agent: str) -> str:
    return f"{rollout_id}/{agent}"


def _agent(name: str, calls: Sequence[ExportedCall], by_id: Mapping[str, Span]) -> dict[str, Any]:
    models = [_model(by_id.get(call.span_id)) for call in calls]
    agent: dict[str, Any] = {"name": name, "version": __version__}
    if model := next(filter(None, models), None):
        agent["model_name"] = model
    if tools := next((call.tools for call in calls if call.tools), None):  # what its requests offered (content on)
        agent["tool_definitions"] = tools
    return agent


def _model(span: Span | None) -> str | None:
    attributes = (span or {}).get("attributes") or {}
    model = attributes.get(semconv.GEN_AI_RESPONSE_MODEL) or attributes.get(semconv.GEN_AI_REQUEST_MODEL)
    return str(model) if model else None


def _conversation(calls: Sequence[ExportedCall], by_id: Mapping[str, Span]) -> list[dict[str, Any]]:
    """One agent's calls as steps: the messages each call added to the conversation, then the call."""
    steps: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    for call in calls:
        inputs = list(call.input_messages or [])
        fresh = bool(history) and inputs[: len(history)] != history
        added = inputs if fresh or not history else inputs[len(history) :]
        first = len(steps)
        for message in added:
            _message_step(message, steps)
        marked = fresh and len(steps) > first  # the fresh context's first step says so; else the call's step
        if marked:
            steps[first].setdefault("extra", {}).setdefault(KEY, {})["context"] = "new"
        steps.append(_call_step(call, by_id.get(call.span_id), fresh_without_messages=fresh and not marked))
        history = [*inputs, call.output_message] if call.output_message is not None else inputs
    return steps


def _message_step(message: Mapping[str, Any], steps: list[dict[str, Any]]) -> None:
    role = message.get("role")
    if role == "tool":  # a tool's result: the observation of the step whose call it answers
        call_id = message.get("tool_call_id")
        result = {"source_call_id": call_id, "content": _text(message.get("content"))}
        if call_id is None:  # a result no call id names (Terminus-2's terminal output): the step just before
            del result["source_call_id"]
            owner = steps[-1] if steps and steps[-1].get("source") == "agent" else None
        else:
            owner = next((s for s in reversed(steps) if _calls_tool(s, call_id)), None)
        if owner is not None:
            owner.setdefault("observation", {"results": []})["results"].append(result)
            return
        steps.append({"source": "system", "message": "", "observation": {"results": [result]}})
        return
    if role == "assistant":  # a reply the agent put in the prompt (a few-shot turn): not a call of this trajectory
        step = {"source": "agent", "message": _text(message.get("content")), "llm_call_count": 0}
        if message.get("reasoning_content"):
            step["reasoning_content"] = message["reasoning_content"]
        if message.get("tool_calls"):
            step["tool_calls"] = [_tool_call(call) for call in message["tool_calls"]]
        steps.append(step)
        return
    source = role if role in ("system", "user") else "user"
    step: dict[str, Any] = {"source": source, "message": _text(message.get("content"))}
    if source != role:
        step["extra"] = {KEY: {"role": role}}
    steps.append(step)


def _calls_tool(step: Mapping[str, Any], call_id: Any) -> bool:
    return any(call.get("tool_call_id") == call_id for call in step.get("tool_calls") or ())


def _call_step(call: ExportedCall, span: Span | None, *, fresh_without_messages: bool) -> dict[str, Any]:
    reply = call.output_message or {}
    step: dict[str, Any] = {"source": "agent", "message": _text(reply.get("content")), "llm_call_count": 1}
    if span is not None and span.get("startTimeUnixNano"):
        step["timestamp"] = _iso(int(span["startTimeUnixNano"]))
    if model := _model(span):
        step["model_name"] = model
    if reply.get("reasoning_content"):
        step["reasoning_content"] = reply["reasoning_content"]
    if reply.get("tool_calls"):
        step["tool_calls"] = [_tool_call(tool_call) for tool_call in reply["tool_calls"]]
    metrics: dict[str, Any] = {}
    if call.prompt_token_ids is not None:
        metrics.update(prompt_tokens=len(call.prompt_token_ids), prompt_token_ids=list(call.prompt_token_ids))
    if call.response_token_ids is not None:
        metrics["completion_tokens"] = len(call.response_token_ids)
        metrics["completion_token_ids"] = list(call.response_token_ids)
    if call.response_logprobs is not None:
        metrics["logprobs"] = list(call.response_logprobs)
    if metrics:
        step["metrics"] = metrics
    ours: dict[str, Any] = {"span_id": call.span_id, "response_id": call.response_id,
                            "policy_version": call.policy_version, "reward": call.reward}  # fmt: skip
    if span is not None and span.get("endTimeUnixNano") and span.get("startTimeUnixNano"):
        ours["duration_ns"] = int(span["endTimeUnixNano"]) - int(span["startTimeUnixNano"])
    if span is not None and (source := (span.get("attributes") or {}).get(semconv.AGL_TOKEN_IDS_SOURCE)):
        ours["token_ids_source"] = source  # not what the model sampled: re-tokenized on import
    if call.output_message is None:
        ours["no_content"] = True  # the span recorded no messages: the step's message is not the reply
    if fresh_without_messages:
        ours["context"] = "new"
    step["extra"] = {KEY: {k: v for k, v in ours.items() if v is not None}}
    return step


def _tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    raw = function.get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        arguments = None
    tool_call: dict[str, Any] = {"tool_call_id": str(call.get("id") or ""), "function_name": str(function.get("name")),
                                 "arguments": arguments if isinstance(arguments, dict) else {}}  # fmt: skip
    if not isinstance(arguments, dict) and raw not in (None, ""):  # ATIF's arguments are an object: the text kept
        tool_call["extra"] = {KEY: {"arguments": raw}}
    return tool_call


def _numbered(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"step_id": number, **step} for number, step in enumerate(steps, start=1)]


def _totals(calls: Sequence[ExportedCall]) -> dict[str, Any]:
    return {
        "total_prompt_tokens": sum(len(c.prompt_token_ids or ()) for c in calls),
        "total_completion_tokens": sum(len(c.response_token_ids or ()) for c in calls),
        "total_steps": len(calls),
    }


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _iso(ns: int) -> str:
    stamp = datetime.datetime.fromtimestamp(ns // 1000 / 1e6, tz=datetime.UTC)
    return stamp.isoformat().replace("+00:00", "Z")


def iso_ns(timestamp: str) -> int:
    """An ISO 8601 timestamp in nanoseconds since the epoch (microsecond precision, as ATIF writes it)."""
    stamp = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.UTC)
    delta = stamp - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


# --- trajectory -> calls -------------------------------------------------------------------------------------------
@dataclass(slots=True)
class ImportedCall:
    """One LLM call read from an agent step: what an LLM span holds."""

    agent: str
    model: str | None
    input_messages: list[dict[str, Any]]  # OpenAI chat format
    output_message: dict[str, Any] | None  # None: the step recorded no content of the reply
    prompt_token_ids: list[int] | None
    response_token_ids: list[int] | None
    response_logprobs: list[float] | None
    start_ns: int | None
    duration_ns: int | None
    span_id: str | None
    response_id: str | None
    policy_version: int | None
    reward: float | None
    step: str  # where it was read: "<trajectory id>#<step id>"
    token_ids_source: str | None = None  # None: the ids the model sampled; else how they were made (re-tokenized)
    tools: list[dict[str, Any]] | None = None  # its agent's tool_definitions (OpenAI's chat format)


@dataclass(slots=True)
class ImportedRollout:
    """A trajectory read back: the rollout's identity (what our export wrote, else what ATIF says) and its calls."""

    rollout_id: str | None
    agent: str
    task_id: str | None
    group_id: str | None
    run_id: str | None
    step: int | None
    mode: str | None
    status: str
    reward: float | None
    input: Any
    policy_version: int | None
    session_id: str | None
    metadata: dict[str, Any]  # the rollout's record as our export wrote it; another tool's: where it came from
    calls: list[ImportedCall] = field(default_factory=list)
    subagents: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be carried, per step


def trajectory_rollout(trajectory: Mapping[str, Any]) -> ImportedRollout:
    """An ATIF trajectory (ours, or another tool's) as a rollout's calls; ValueError when it is not ATIF."""
    version = trajectory.get("schema_version")
    if not isinstance(version, str) or not version.startswith("ATIF-v1."):
        raise ValueError(f"not an ATIF trajectory: schema_version {version!r}")
    if not isinstance(trajectory.get("steps"), list) or not isinstance(trajectory.get("agent"), Mapping):
        raise ValueError("an ATIF trajectory needs agent and steps")
    ours = _ours(trajectory)
    root = str(trajectory["agent"].get("name") or ROOT_AGENT)
    steps = list(trajectory["steps"])
    task_step = steps[0] if steps and _ours(steps[0]).get("task") else None
    task_input = ours.get("input") if "input" in ours else (task_step or _first_user(steps) or {}).get("message")
    imported = ImportedRollout(
        rollout_id=ours.get("rollout_id") or trajectory.get("trajectory_id"), agent=root,
        task_id=ours.get("task_id"), group_id=ours.get("group_id"), run_id=ours.get("run_id"),
        step=ours.get("step"), mode=ours.get("mode"), status=ours.get("status") or "succeeded",
        reward=ours.get("reward", _external_reward(trajectory)), input=task_input,
        policy_version=ours.get("policy_version"), session_id=trajectory.get("session_id"),
        metadata=dict(ours["metadata"]) if isinstance(ours.get("metadata"), Mapping) else {
            "imported_from": "atif", "session_id": trajectory.get("session_id"),
            "agent": (trajectory.get("agent") or {}).get("name"),
        },
    )  # fmt: skip
    embedded = {str(sub.get("trajectory_id")): sub for sub in trajectory.get("subagent_trajectories") or ()}
    imported.calls += _calls(trajectory, root, [s for s in steps if s is not task_step], imported.notes)
    for sub in embedded.values():
        name = str((sub.get("agent") or {}).get("name") or sub.get("trajectory_id"))
        imported.subagents.append(name)
        imported.calls += _calls(sub, name, list(sub.get("steps") or ()), imported.notes)
    imported.calls.sort(key=lambda call: call.start_ns if call.start_ns is not None else 0)  # stable: step order
    return imported


def _ours(obj: Mapping[str, Any]) -> dict[str, Any]:
    extra = obj.get("extra")
    found = extra.get(KEY) if isinstance(extra, Mapping) else None
    return dict(found) if isinstance(found, Mapping) else {}


def _first_user(steps: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((step for step in steps if step.get("source") == "user"), None)


def _external_reward(trajectory: Mapping[str, Any]) -> float | None:
    """Another tool's reward, where ATIF producers put one (`final_metrics.extra.reward`, `extra.reward`)."""
    for holder in ((trajectory.get("final_metrics") or {}).get("extra"), trajectory.get("extra")):
        if isinstance(holder, Mapping) and isinstance(holder.get("reward"), (int, float)):
            return float(holder["reward"])
    return None


def _calls(
    trajectory: Mapping[str, Any], agent: str, steps: Sequence[Mapping[str, Any]], notes: list[str]
) -> list[ImportedCall]:
    history: list[dict[str, Any]] = []
    calls: list[ImportedCall] = []
    name = trajectory.get("trajectory_id") or trajectory.get("session_id") or agent
    tools = (trajectory.get("agent") or {}).get("tool_definitions") or None
    for step in steps:
        ours = _ours(step)
        if ours.get("context") == "new":
            history = []
        source = step.get("source")
        # a step copied from the parent's context (a sub-agent's trajectory starts with it) is history, not a call
        is_call = source == "agent" and step.get("llm_call_count") != 0 and not step.get("is_copied_context")
        if source in ("system", "user") and (step.get("message") not in ("", None) or not step.get("observation")):
            history.append({"role": ours.get("role", source), "content": _message_text(step.get("message"))})
        elif source == "agent" and not is_call and not _dispatch(step):
            history.append(_reply(step))
        if is_call:
            metrics = step.get("metrics") or {}
            output = None if ours.get("no_content") else _reply(step)
            where = f"{name}#{step.get('step_id')}"
            if metrics.get("completion_token_ids") is None:
                notes.append(f"{where}: no token ids (trains by its messages only: SFT, DPO; or import with a "
                             "tokenizer to re-tokenize it)")  # fmt: skip
            calls.append(ImportedCall(
                agent=agent, model=step.get("model_name"), input_messages=list(history),
                output_message=output, prompt_token_ids=metrics.get("prompt_token_ids"),
                response_token_ids=metrics.get("completion_token_ids"), response_logprobs=metrics.get("logprobs"),
                start_ns=iso_ns(step["timestamp"]) if step.get("timestamp") else None,
                duration_ns=ours.get("duration_ns"), span_id=ours.get("span_id"), response_id=ours.get("response_id"),
                policy_version=ours.get("policy_version"), reward=ours.get("reward"), step=where,
                token_ids_source=ours.get("token_ids_source"), tools=tools,
            ))  # fmt: skip
            if output is not None:
                history.append(output)
        for result in (step.get("observation") or {}).get("results") or ():
            if result.get("source_call_id") is not None or result.get("content") is not None:
                history.append({"role": "tool", "tool_call_id": result.get("source_call_id"),
                                "content": _message_text(result.get("content"))})  # fmt: skip
    return calls


def _reply(step: Mapping[str, Any]) -> dict[str, Any]:
    """An agent step's reply as an OpenAI chat message (its reasoning as vLLM's `reasoning_content`)."""
    reply: dict[str, Any] = {"role": "assistant", "content": _message_text(step.get("message")) or None}
    if step.get("reasoning_content"):
        reply["reasoning_content"] = _message_text(step["reasoning_content"])
    if step.get("tool_calls"):
        reply["tool_calls"] = [_openai_tool_call(call) for call in step["tool_calls"]]
    return reply


def _dispatch(step: Mapping[str, Any]) -> bool:
    results = (step.get("observation") or {}).get("results") or ()
    return bool(results) and all(result.get("subagent_trajectory_ref") for result in results)


def _message_text(message: Any) -> str:
    """A step's message as text: a string as it is; content parts' text joined (images and audio are not carried)."""
    if message is None:
        return ""
    if isinstance(message, str):
        return message
    if isinstance(message, list):
        return "".join(str(part.get("text") or "") for part in message if isinstance(part, Mapping))
    return str(message)


def _openai_tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    raw = _ours(call).get("arguments")
    arguments = raw if isinstance(raw, str) else json.dumps(call.get("arguments") or {}, ensure_ascii=False)
    return {"id": call.get("tool_call_id"), "type": "function",
            "function": {"name": call.get("function_name"), "arguments": arguments}}  # fmt: skip


def span_id_for(*parts: str) -> str:
    """A span id (16 hex) derived from names: the same trajectory imports with the same ids."""
    return hashlib.blake2b("|".join(parts).encode(), digest_size=8).hexdigest()


def trace_id_for(rollout_id: str) -> str:
    return hashlib.blake2b(rollout_id.encode(), digest_size=16).hexdigest()


__all__ = ["SCHEMA_VERSION", "ImportedCall", "ImportedRollout", "iso_ns", "rollout_trajectory", "trajectory_rollout"]
