"""ATIF trajectories into a store: each one a rollout with its spans, as if a runner had run it.

    report = import_atif("trajectories.jsonl", "agl-demo/collector.sqlite3")    # or a collector's URL
    print(report.summary())

Every trajectory is read first (`atif.trajectory_rollout`); one that is not ATIF stops the import before anything is
written, with its place in the file. Then, in one run of their own (`atif-import-...`, so no training's runner takes
them), the rollouts are queued (the trajectory's rollout id when it carries ours, else its `trajectory_id`; an id
already in the store is refused, never overwritten), claimed, their spans posted over OTLP/JSON to the collector
(the rollout's agent span, a span per sub-agent, an LLM span per call with its messages, token ids, logprobs and
policy version, and `agl.reward` spans), and completed with the trajectory's status and reward. They then show in
/ui, export again (`export --shape atif` gives the same trajectories back) and train: by their messages (SFT, DPO)
always, by their tokens where the steps carry token ids (the report counts the calls without).

Sub-agent trajectories another tool wrote to files of their own (`subagent_trajectory_ref` with a `trajectory_path`,
as Harbor's Terminus-2 writes its context summarization) are read from beside FILE and imported as the rollout's
sub-agents; one that is not there is said in the report. Steps without token ids are re-tokenized only when asked
(`tokenizer=`, `--tokenizer MODEL`): the prompt rendered by the model's chat template, the reply as the template
closes it, marked `agl.llm.token_ids_source = "retokenized:<model>"` on the span and in the export: these ids are
what that model would read, not what any model sampled, and they carry no logprobs.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from lightning_otel import semconv
from lightning_otel.adapters.messages import genai_message, genai_tool_definitions
from lightning_otel.collector.client import Client, CollectorError, otlp_endpoint_for
from lightning_otel.export.atif import ImportedCall, ImportedRollout, span_id_for, trace_id_for, trajectory_rollout
from lightning_otel.export.dataset_export import store_client
from lightning_otel.serving.sampler_api import ChatTokenizerLike

RUNNER_ID = "atif-import"


@dataclass(slots=True)
class ImportReport:
    trajectories: int = 0
    rollouts: list[str] = field(default_factory=list)
    calls: int = 0
    calls_without_token_ids: int = 0
    calls_retokenized: int = 0
    spans: int = 0
    run_id: str = ""
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"imported {len(self.rollouts)} rollouts from {self.trajectories} trajectories: {self.calls} LLM calls "
            f"({self.calls_without_token_ids} without token ids, {self.calls_retokenized} re-tokenized), "
            f"{self.spans} spans; run {self.run_id}"
        ]
        lines += [f"  {note}" for note in self.notes[:20]]
        if len(self.notes) > 20:
            lines.append(f"  ... and {len(self.notes) - 20} more")
        return "\n".join(lines)


def read_trajectories(path: str | Path) -> list[dict[str, Any]]:
    """A file's trajectories: a JSON object (one), a JSON array, or JSON Lines (one a line). A line or file that is
    not JSON is a ValueError naming where."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return [whole]
    if isinstance(whole, list):
        return whole
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            found.append(json.loads(line))
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc})") from None
    return found


def import_atif(
    source: str | Path | Sequence[Mapping[str, Any]],
    store: str | Path | Client,
    *,
    auth_token: str | None = None,
    tokenizer: str | Path | ChatTokenizerLike | None = None,
) -> ImportReport:
    """Import ATIF trajectories (a file, or the parsed trajectories) into `store` (a SQLite path, a PostgreSQL URL
    or a collector's URL). `tokenizer` (a model name or folder, or a chat tokenizer) re-tokenizes the calls that
    carry no token ids. See the module docstring."""
    trajectories = read_trajectories(source) if isinstance(source, (str, Path)) else list(source)
    directory = Path(source).parent if isinstance(source, (str, Path)) else None
    rollouts = []
    notes: list[str] = []
    for number, trajectory in enumerate(trajectories, start=1):
        if not isinstance(trajectory, Mapping):
            raise ValueError(f"trajectory {number}: not a JSON object")
        try:
            rollouts.append(trajectory_rollout(_with_referenced_subagents(trajectory, directory, notes)))
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"trajectory {number}: {exc}") from None
    retokenized = retokenize(rollouts, tokenizer) if tokenizer is not None else 0
    for number, rollout in enumerate(rollouts, start=1):
        rollout.rollout_id = rollout.rollout_id or f"ro-atif-{span_id_for(json.dumps(trajectories[number - 1]))}"
    ids = [r.rollout_id for r in rollouts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"two trajectories carry the same rollout id: {sorted({i for i in ids if ids.count(i) > 1})}")
    report = ImportReport(trajectories=len(trajectories), run_id=f"atif-import-{uuid.uuid4().hex[:12]}", notes=notes,
                          calls_retokenized=retokenized)  # fmt: skip
    with store_client(store, auth_token, create=True) as client:
        taken = [rollout_id for rollout_id in ids if _exists(client, rollout_id)]  # type: ignore[arg-type]
        if taken:
            raise ValueError(f"the store already holds rollouts {taken[:5]}{' ...' if len(taken) > 5 else ''}: "
                             "import into another store, or remove them first")  # fmt: skip
        client.start_run(report.run_id, lease_s=600.0)
        try:
            _write(client, rollouts, report)
        finally:
            client.end_run(report.run_id)
    return report


def _with_referenced_subagents(
    trajectory: Mapping[str, Any], directory: Path | None, notes: list[str]
) -> Mapping[str, Any]:
    """The trajectory with the sub-agent trajectories its steps reference by file (`trajectory_path`, relative to
    the imported file) embedded, as ATIF v1.7 embeds them; the others are left as they are."""
    embedded = {str(sub.get("trajectory_id")) for sub in trajectory.get("subagent_trajectories") or ()}
    found: list[dict[str, Any]] = []
    for step in trajectory.get("steps") or ():
        for result in ((step.get("observation") or {}).get("results") or ()) if isinstance(step, Mapping) else ():
            for ref in result.get("subagent_trajectory_ref") or ():
                path = ref.get("trajectory_path")
                key = str(ref.get("trajectory_id") or ref.get("session_id") or path)
                if not path or key in embedded:
                    continue
                where = (directory / path) if directory is not None else None
                if where is None or not where.is_file():
                    notes.append(f"sub-agent trajectory {path} (referenced by step {step.get('step_id')}) is not "
                                 f"beside the imported file: its calls are not imported")  # fmt: skip
                    continue
                [sub] = read_trajectories(where)[:1] or [{}]
                found.append({**sub, "trajectory_id": key})
                embedded.add(key)
    if not found:
        return trajectory
    return {**trajectory, "subagent_trajectories": [*(trajectory.get("subagent_trajectories") or ()), *found]}


def retokenize(rollouts: Sequence[ImportedRollout], tokenizer: str | Path | ChatTokenizerLike) -> int:
    """Give the calls without token ids the ids `tokenizer`'s chat template makes of their messages (marked as such;
    see the module docstring). Returns how many calls were re-tokenized."""
    chat, name = _chat_tokenizer(tokenizer)
    done = 0
    for rollout in rollouts:
        for call in rollout.calls:
            if call.response_token_ids is not None or call.output_message is None:
                continue
            prompt_text = chat.render_chat(call.input_messages, add_generation_prompt=True)
            whole = chat.render_chat([*call.input_messages, call.output_message], add_generation_prompt=False)
            if not whole.startswith(prompt_text):
                rollout.notes.append(f"{call.step}: the chat template does not extend the prompt with the reply: "
                                     "left without token ids")  # fmt: skip
                continue
            response = chat.encode(whole[len(prompt_text) :])
            if chat.eos_token_id in response:  # what a sampler stops at: the end of the turn, not what follows it
                response = response[: response.index(chat.eos_token_id) + 1]
            call.prompt_token_ids, call.response_token_ids = chat.encode(prompt_text), response
            call.token_ids_source = f"retokenized:{name}"
            rollout.notes = [note for note in rollout.notes if not note.startswith(f"{call.step}: no token ids")]
            done += 1
    return done


def _chat_tokenizer(tokenizer: str | Path | ChatTokenizerLike) -> tuple[ChatTokenizerLike, str]:
    if not isinstance(tokenizer, (str, Path)):
        return tokenizer, type(tokenizer).__name__
    from transformers import AutoTokenizer

    from lightning_otel.models.named import model_folder
    from lightning_otel.serving.sampler_api import HFChatTokenizer

    folder = model_folder(tokenizer)
    return HFChatTokenizer(AutoTokenizer.from_pretrained(str(folder))), str(tokenizer)


def _exists(client: Client, rollout_id: str) -> bool:
    try:
        client.rollout(rollout_id)
    except CollectorError as exc:
        if ": HTTP 404 " in str(exc):  # the client's error names the status
            return False
        raise
    return True


def _write(client: Client, rollouts: list[ImportedRollout], report: ImportReport) -> None:
    specs = [
        {"rollout_id": r.rollout_id, "input": r.input, "task_id": r.task_id, "group_id": r.group_id,
         "mode": r.mode or "train", "run_id": report.run_id, "max_attempts": 1,
         "metadata": {k: v for k, v in r.metadata.items() if v is not None}}
        for r in rollouts
    ]  # fmt: skip
    client.enqueue([{k: v for k, v in spec.items() if v is not None} for spec in specs])
    attempts = _claim_all(client, report.run_id, {r.rollout_id for r in rollouts})  # type: ignore[misc]
    endpoint = otlp_endpoint_for(client.url, client.collector_info()) + "/v1/traces"
    headers = {"content-type": "application/json"}
    if client.auth_token:
        headers["authorization"] = f"Bearer {client.auth_token}"
    for rollout in rollouts:
        attempt_id = attempts[rollout.rollout_id]  # type: ignore[index]
        spans = list(_spans(rollout, attempt_id))
        answer = httpx.post(endpoint, content=json.dumps(_otlp(spans)), headers=headers, timeout=60)
        if answer.status_code >= 400:
            raise RuntimeError(f"the collector refused rollout {rollout.rollout_id}'s spans: HTTP {answer.status_code} "
                               f"{answer.text[:300]}")  # fmt: skip
        succeeded = rollout.status == "succeeded"
        client.complete(str(rollout.rollout_id), attempt_id, "succeeded" if succeeded else "failed",
                        reward=rollout.reward, error=None if succeeded else f"imported: {rollout.status}")  # fmt: skip
        report.rollouts.append(rollout.rollout_id)  # type: ignore[arg-type]
        report.calls += len(rollout.calls)
        report.calls_without_token_ids += sum(1 for call in rollout.calls if call.response_token_ids is None)
        report.spans += len(spans)
        report.notes += rollout.notes


def _claim_all(client: Client, run_id: str, wanted: set[str]) -> dict[str, str]:
    attempts: dict[str, str] = {}
    deadline = time.monotonic() + 60
    while len(attempts) < len(wanted) and time.monotonic() < deadline:
        answer = client.claim(RUNNER_ID, max_attempts=len(wanted) - len(attempts), wait_s=1.0, run_id=run_id)
        for attempt in answer.get("attempts") or ():
            attempts[attempt["rollout_id"]] = attempt["attempt_id"]
    if len(attempts) < len(wanted):
        raise RuntimeError(f"could claim {len(attempts)} of the {len(wanted)} imported rollouts in 60 s")
    return attempts


def _spans(rollout: ImportedRollout, attempt_id: str) -> Iterator[dict[str, Any]]:
    """The rollout's spans as flat dicts (OTLP-encoded by `_otlp`)."""
    rollout_id = str(rollout.rollout_id)
    trace_id = trace_id_for(rollout_id)
    identity = {semconv.AGL_ROLLOUT_ID: rollout_id, semconv.AGL_ATTEMPT_ID: attempt_id}
    starts = [call.start_ns for call in rollout.calls if call.start_ns is not None]
    began = min(starts) if starts else time.time_ns()
    ended = max((_end(call, began) for call in rollout.calls), default=began)
    root_id = span_id_for(rollout_id, "rollout")
    yield _span(trace_id, root_id, None, f"invoke_agent {rollout.agent}", began, ended, {
        **identity, semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT, semconv.GEN_AI_AGENT_NAME: rollout.agent,
        semconv.AGL_ROLLOUT_AGENT_NAMES: [rollout.agent],
    })  # fmt: skip
    parents = {rollout.agent: root_id}
    for name in rollout.subagents:
        mine = [call for call in rollout.calls if call.agent == name]
        first = min((c.start_ns for c in mine if c.start_ns is not None), default=began)
        parents[name] = span_id_for(rollout_id, "agent", name)
        yield _span(trace_id, parents[name], root_id, f"invoke_agent {name}", first,
                    max((_end(c, first) for c in mine), default=first), {
            **identity, semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT, semconv.GEN_AI_AGENT_NAME: name,
        })  # fmt: skip
    final_lands_on = _final_reward_call(rollout)
    for call in rollout.calls:
        span_id = call.span_id or span_id_for(rollout_id, call.step)
        response_id = call.response_id or f"atif-{span_id}"
        start = call.start_ns if call.start_ns is not None else began
        yield _span(trace_id, span_id, parents.get(call.agent, root_id), f"chat {call.model or ''}".strip(), start,
                    _end(call, start), {**identity, **_call_attributes(call, response_id)}, kind=3)  # fmt: skip
        if call.reward is not None and call is not final_lands_on:
            yield _reward(trace_id, span_id, identity, call.reward, _end(call, start), response_id)
    if rollout.reward is not None:
        yield _reward(trace_id, root_id, identity, rollout.reward, ended, None)


def _final_reward_call(rollout: ImportedRollout) -> ImportedCall | None:
    """The call the rollout's final reward lands on when it is written last (the latest call): its own reward span
    is then that one, not a second one."""
    last = rollout.calls[-1] if rollout.calls else None
    return last if last is not None and last.reward is not None and last.reward == rollout.reward else None


def _end(call: ImportedCall, default: int) -> int:
    start = call.start_ns if call.start_ns is not None else default
    return start + (call.duration_ns or 0)


def _call_attributes(call: ImportedCall, response_id: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT,
        semconv.GEN_AI_AGENT_NAME: call.agent,
        semconv.GEN_AI_RESPONSE_ID: response_id,
        semconv.GEN_AI_INPUT_MESSAGES: json.dumps([genai_message(m) for m in call.input_messages], ensure_ascii=False),
    }
    if call.model:
        attributes[semconv.GEN_AI_REQUEST_MODEL] = attributes[semconv.GEN_AI_RESPONSE_MODEL] = call.model
    if call.output_message is not None:
        attributes[semconv.GEN_AI_OUTPUT_MESSAGES] = json.dumps([genai_message(call.output_message, "stop")],
                                                                ensure_ascii=False)  # fmt: skip
    if call.prompt_token_ids is not None:
        attributes[semconv.AGL_PROMPT_TOKEN_IDS] = list(call.prompt_token_ids)
        attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] = len(call.prompt_token_ids)
    if call.response_token_ids is not None:
        attributes[semconv.AGL_RESPONSE_TOKEN_IDS] = list(call.response_token_ids)
        attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = len(call.response_token_ids)
    if call.response_logprobs is not None:
        attributes[semconv.AGL_RESPONSE_LOGPROBS] = [float(x) for x in call.response_logprobs]
    if call.policy_version is not None:
        attributes[semconv.AGL_POLICY_VERSION] = int(call.policy_version)
    if call.token_ids_source is not None:
        attributes[semconv.AGL_TOKEN_IDS_SOURCE] = call.token_ids_source
    if call.tools:
        attributes[semconv.GEN_AI_TOOL_DEFINITIONS] = json.dumps(genai_tool_definitions(call.tools), ensure_ascii=False)
    return attributes


def _reward(trace_id: str, parent: str, identity: dict[str, Any], value: float, at: int,
            response_id: str | None) -> dict[str, Any]:  # fmt: skip
    attributes = {**identity, semconv.AGL_REWARD_NAME: semconv.DEFAULT_REWARD_NAME, semconv.AGL_REWARD_VALUE: value}
    if response_id is not None:
        attributes[semconv.AGL_REWARD_RESPONSE_ID] = response_id
    span_id = span_id_for(trace_id, parent, str(at), str(value), response_id or "")
    return _span(trace_id, span_id, parent, semconv.REWARD_SPAN_NAME, at, at, attributes)


def _span(trace_id: str, span_id: str, parent: str | None, name: str, start: int, end: int,
          attributes: dict[str, Any], kind: int = 1) -> dict[str, Any]:  # fmt: skip
    return {"traceId": trace_id, "spanId": span_id, "parentSpanId": parent or "", "name": name, "kind": kind,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(max(end, start)),
            "attributes": attributes}  # fmt: skip


def _otlp(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """OTLP/JSON of flat spans (attributes as OTLP AnyValues)."""
    encoded = [{**span, "attributes": [{"key": k, "value": _any_value(v)} for k, v in span["attributes"].items()
                                       if v is not None]} for span in spans]  # fmt: skip
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "agl-atif-import"}}]}
    scope = {"scope": {"name": "lightning_otel.atif"}, "spans": encoded}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}


def _any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_any_value(v) for v in value]}}
    return {"stringValue": str(value)}


__all__ = ["ImportReport", "import_atif", "read_trajectories", "retokenize"]
