"""What the rollout view (`/ui`) shows, as JSON: runs and their steps, a step's rollouts, one rollout explained.

A run is what one `TrainingRun` enqueued: each rollout's metadata names its `run_id`, `step` (per mode),
`batch_id` and the run's `agent_match` (rollouts enqueued without them are grouped by their batch). Samples are
the adapter's own (`TraceToTriplet` on the stored spans of the rollout's final attempt), so the view shows what the
trainer received: which calls `agent_match` selected and why the others were left out (`CallDecision`), which
response tokens were trained, and why a rollout gave no sample.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from types import EllipsisType
from typing import Any

import orjson

from lightning_otel import semconv
from lightning_otel.adapters.llm_calls import span_with_messages
from lightning_otel.adapters.recorded_settings import adapter_of, recorded_adapter, recorded_training
from lightning_otel.adapters.triplets import AdaptedRollout, TraceToTriplet
from lightning_otel.collector.queue.queue_reads import get_rollout_detail
from lightning_otel.collector.queue.rollout_rows import NotFound
from lightning_otel.collector.reads.rollout_credit import credits_by_span, group_records
from lightning_otel.collector.reads.token_text import TokenText
from lightning_otel.collector.reads.trace_search import find_traces
from lightning_otel.collector.receiving.log_records import attach_logs, rollout_logs_without_span
from lightning_otel.collector.receiving.otlp_json import flat_span
from lightning_otel.collector.stores.store import SpanStore, StateTransaction, TraceQuery
from lightning_otel.flat_span import Span

NO_RUN = "(no run id)"
_COLUMNS = (
    "rollout_id, task_id, group_id, mode, metadata, status, attempts, attempt_id, reward, error, created_ns, end_ns, "
    "cause"
)
# the final attempt's runner and policy version (the rollout's own version is None: "the latest when claimed")
_ATTEMPT_COLUMNS = ("runner_id", "policy_version")
_SELECT = (
    f"SELECT {', '.join('r.' + c for c in _COLUMNS.split(', '))}, a.runner_id, a.resources_version "
    "FROM agl_rollouts r LEFT JOIN agl_attempts a ON a.rollout_id = r.rollout_id AND a.attempt_id = r.attempt_id "
    "ORDER BY r.position DESC LIMIT ?"
)
MAX_ROLLOUTS_SCANNED = 20_000  # the newest rollouts; older runs fall off the list, not out of the store


@dataclass(slots=True)
class ViewSettings:
    jaeger_ui_url: str | None = None
    phoenix_ui_url: str | None = None
    token_text: TokenText | None = None


def _rows(tx: StateTransaction, limit: int) -> list[dict[str, Any]]:
    names = [*_COLUMNS.split(", "), *_ATTEMPT_COLUMNS]
    records = [dict(zip(names, row, strict=True)) for row in tx.execute(_SELECT, (limit,))]
    for record in records:
        metadata = orjson.loads(record.pop("metadata"))
        record["run_id"] = str(metadata.get("run_id") or NO_RUN)
        batch = str(metadata.get("batch_id") or record["group_id"].split("/", 1)[0])
        record["batch_id"] = batch
        record["step"] = metadata.get("step")
        record["adapter"] = adapter = recorded_adapter(metadata)  # the trainer's adapter, whole
        record["agent_match"] = adapter.get("agent_match")
        training = recorded_training(metadata)
        record["estimator"] = training["estimator"]  # how the run turned rewards into advantages
        record["max_staleness"] = training["max_staleness"] or None  # asynchronous training's bound (None: synchronous)
        record["note"] = metadata.get("note")  # the algorithm's label for the batch (APO: round, candidate, role)
        if metadata.get("policy_version") is not None:  # the weights' version, when the algorithm knows it
            record["policy_version"] = metadata["policy_version"]
    return records


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _step_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    statuses = [r["status"] for r in records]
    return {
        "mode": records[0]["mode"],
        "step": records[0]["step"],
        "batch_id": records[0]["batch_id"],
        "note": records[0].get("note"),
        "rollouts": len(records),
        "statuses": {status: statuses.count(status) for status in dict.fromkeys(statuses)},
        "reward_mean": _mean([r["reward"] for r in records if r["reward"] is not None]),
        "policy_versions": sorted({r["policy_version"] for r in records if r["policy_version"] is not None}),
        "started_ns": min(r["created_ns"] for r in records),
        "ended_ns": max((r["end_ns"] or 0 for r in records), default=0) or None,
    }


async def runs(store: SpanStore, limit: int = MAX_ROLLOUTS_SCANNED) -> dict[str, Any]:
    """Every run among the newest `limit` rollouts, newest first, each with its steps (train) and validations."""
    records = await store.state_transaction(lambda tx: _rows(tx, limit))
    found = _runs_of(records)
    for run in found:  # a policy per agent: each policy's curve, from the trainer's step spans
        if isinstance(run["agent_match"], dict):
            policies = list(dict.fromkeys(run["agent_match"].values()))
            run["policy_curves"] = await _policy_curves(store, run["run_id"], policies)
    return {"runs": found, "scanned": len(records), "limit": limit}


POLICY_CURVE_METRICS = ("reward_mean", "samples", "advantage_abs_mean", "grad_norm", "skipped")


async def _policy_curves(store: SpanStore, run_id: str, policies: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Per policy, per training step: what the trainer logged of it (`policy/<name>/*`: the mean reward of its
    samples, their count and mean |advantage|, its update's gradient norm, whether it was skipped)."""
    query = TraceQuery(service=semconv.TRAINER_SERVICE, operation=semconv.TRAINING_STEP_SPAN,
                       tags={semconv.AGL_RUN_ID: run_id}, limit=10_000)  # fmt: skip
    steps: dict[int, dict[str, Any]] = {}
    for spans in await find_traces(store, query):
        for span in map(flat_span, spans):
            attributes = span.get("attributes") or {}
            if span["name"] == semconv.TRAINING_STEP_SPAN and semconv.AGL_TRAINING_STEP in attributes:
                steps[int(attributes[semconv.AGL_TRAINING_STEP])] = attributes
    curves: dict[str, list[dict[str, Any]]] = {}
    for policy in policies:
        prefix = f"{semconv.AGL_METRIC_PREFIX}policy/{policy}/"
        curves[policy] = [
            {"step": step, **{name: _finite(attributes.get(prefix + name)) for name in POLICY_CURVE_METRICS}}
            for step, attributes in sorted(steps.items())
        ]
    return curves


def _finite(value: Any) -> float | None:
    """A metric as JSON carries it: NaN (no sample) and absent become null."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _runs_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_run: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for record in reversed(records):  # oldest first, so batches keep their order when they have no step number
        by_run.setdefault(record["run_id"], {}).setdefault(f"{record['mode']}|{record['batch_id']}", []).append(record)
    out = []
    for run_id, batches in by_run.items():
        steps = [_step_summary(batch) for batch in batches.values()]
        for mode in {s["mode"] for s in steps}:  # number the batches of old rollouts that carried no step
            of_mode = [s for s in steps if s["mode"] == mode]
            if any(s["step"] is None for s in of_mode):
                for number, summary in enumerate(of_mode, start=1):
                    summary["step"] = number
        first = next(iter(batches.values()))[0]
        out.append(
            {
                "run_id": run_id,
                "agent_match": first["agent_match"],
                "max_staleness": first["max_staleness"],
                "started_ns": min(s["started_ns"] for s in steps),
                "rollouts": sum(s["rollouts"] for s in steps),
                "steps": sorted(steps, key=lambda s: (s["mode"], s["step"])),
            }
        )
    out.sort(key=lambda run: run["started_ns"], reverse=True)
    return out


async def _adapted(store: SpanStore, record: dict[str, Any], adapter: TraceToTriplet) -> tuple[list[Span], Any]:
    spans = [flat_span(s) for s in await store.rollout_spans(record["rollout_id"], record["attempt_id"])]
    await attach_logs(store, spans)  # log records among their spans' events, as the trainer reads them
    return spans, adapter.adapt(spans, task_id=record["task_id"])


def _no_sample_reason(record: dict[str, Any], adapted: AdaptedRollout | None, agent_match: str | None) -> str | None:
    if record["status"] != "succeeded":
        error = f": {record['error']}" if record.get("error") else ""
        cause = f" ({record['cause']})" if record.get("cause") else ""
        return f"the rollout ended {record['status']} after {record['attempts']} attempt(s){cause}{error}; failed rollouts are not trained"  # noqa: E501
    if adapted is None or adapted.triplets:
        return None
    return adapted.diagnostics.why_no_sample(agent_match)


async def step_rollouts(
    store: SpanStore, run_id: str, mode: str, step: int, agent_match: str | EllipsisType | None = ...
) -> dict[str, Any]:
    """The rollouts of one step with what the adapter made of each (`agent_match`: ... for the run's own)."""
    records = await store.state_transaction(lambda tx: _rows(tx, MAX_ROLLOUTS_SCANNED))
    found = _runs_of([r for r in records if r["run_id"] == run_id])  # one run, or none
    run = found[0] if found else None
    summary = next((s for s in run["steps"] if s["mode"] == mode and s["step"] == step), None) if run else None
    if summary is None:
        raise NotFound(f"no {mode} step {step} in run {run_id!r}")
    records = [r for r in reversed(records) if r["run_id"] == run_id and r["batch_id"] == summary["batch_id"]]
    pattern = run["agent_match"] if agent_match is ... else agent_match
    adapter = TraceToTriplet.from_config({**records[0]["adapter"], "agent_match": pattern})
    entries: list[tuple[dict[str, Any], AdaptedRollout | None]] = []
    for record in records:
        adapted = None
        if record["attempt_id"]:
            _, adapted = await _adapted(store, record, adapter)
        entries.append((record, adapted))
    credits = credits_by_span(entries, records[0]["estimator"])
    rollouts = []
    for record, adapted in entries:
        diagnostics = adapted.diagnostics if adapted else None
        rollouts.append(
            {
                **{k: record[k] for k in ("rollout_id", "task_id", "group_id", "status", "attempts", "attempt_id")},
                "reward": record["reward"],
                "error": record["error"],
                "cause": record["cause"],  # infrastructure or policy, and what (`agl.failure_rule`)
                "policy_version": record["policy_version"],
                # the versions that sampled its selected calls (asynchronous training: often newer than queued)
                "sampled_versions": sorted(
                    {t.policy_version for t in adapted.triplets if t.policy_version is not None} if adapted else set()
                ),
                "runner_id": record["runner_id"],
                "agents": diagnostics.agents_seen if diagnostics else [],
                "rollout_agents": diagnostics.rollout_agents if diagnostics else [],
                "llm_calls": diagnostics.llm_calls if diagnostics else 0,
                "samples": len(adapted.triplets) if adapted else 0,
                # one entry a call: a copy of it (the gateway's, beside the agent client's) is folded into it
                "calls": [
                    {**call.to_json(), "credit": credits.get(call.span_id)}
                    for call in (diagnostics.calls if diagnostics else [])
                    if call.why[0] != "duplicate"
                ],
                "no_sample_reason": _no_sample_reason(record, adapted, pattern),
            }
        )
    trainer, trained = await _trainer_step(store, run_id, step) if mode == "train" else (None, {})
    for rollout in rollouts:  # the samples the update was given (0: none of its calls trained)
        rollout["trained_samples"] = trained.get(rollout["rollout_id"], 0)
    sampled: dict[int, int] = {}
    for rollout in rollouts:
        for version in rollout["sampled_versions"]:
            sampled[version] = sampled.get(version, 0) + 1
    prompts = await _prompts(store, {r["policy_version"] for r in records if r["policy_version"] is not None})
    return {"run_id": run_id, "agent_match": pattern, "run_agent_match": run["agent_match"], "step": summary,
            "max_staleness": run["max_staleness"], "sampled_versions": sampled, "trainer_metrics": trainer,
            "prompts": prompts, "rollouts": rollouts}  # fmt: skip


async def _prompts(store: SpanStore, versions: set[int]) -> dict[str, dict[str, str]]:
    """The prompt templates among the resources versions the step's rollouts ran with: {version: {name: text}}
    (an algorithm that changes prompts, APO, shows each candidate on its batch's page)."""

    def read(tx: StateTransaction) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for version in sorted(versions)[:20]:
            rows = tx.execute("SELECT resources FROM agl_resources WHERE version = ?", (version,))
            if rows:
                resources = orjson.loads(rows[0][0])
                templates = {name: value["template"] for name, value in resources.items()
                             if isinstance(value, dict) and value.get("__resource__") == "prompt_template"}  # fmt: skip
                if templates:
                    found[str(version)] = templates
        return found

    return await store.state_transaction(read) if versions else {}


async def _trainer_step(store: SpanStore, run_id: str, step: int) -> tuple[dict[str, float] | None, dict[str, int]]:
    """The metrics the trainer logged for training step `step` of the run (its `agl.training.step` span; a trainer
    restarted from its checkpoint may have logged the step twice: the later one), and how many samples it trained
    of each rollout."""
    tags = {semconv.AGL_RUN_ID: run_id, semconv.AGL_TRAINING_STEP: str(step)}
    query = TraceQuery(service=semconv.TRAINER_SERVICE, operation=semconv.TRAINING_STEP_SPAN, tags=tags, limit=20)
    prefix = semconv.AGL_METRIC_PREFIX
    found = [span for spans in await find_traces(store, query) for span in map(flat_span, spans)
             if span["name"] == semconv.TRAINING_STEP_SPAN]  # fmt: skip
    if not found:
        return None, {}
    attributes = max(found, key=lambda span: span["endTimeUnixNano"]).get("attributes") or {}
    trained: dict[str, int] = {}
    for rollout in attributes.get(semconv.AGL_TRAINED_ROLLOUTS) or ():
        trained[rollout] = trained.get(rollout, 0) + 1
    return {k.removeprefix(prefix): float(v) for k, v in attributes.items() if k.startswith(prefix)}, trained


async def _teacher_logprobs(store: SpanStore, rollout_id: str, attempt_id: str | None) -> dict[str, list[float]]:
    """On-policy distillation: the teacher's logprob of each response token of this attempt's scored calls, by the
    call spans its samples cover (a trainer restarted from its checkpoint may have scored a rollout twice: the
    later)."""
    query = TraceQuery(service=semconv.TRAINER_SERVICE, operation=semconv.TEACHER_SPAN,
                       tags={semconv.AGL_TEACHER_ROLLOUT: rollout_id}, limit=50)  # fmt: skip
    found = [span for spans in await find_traces(store, query) for span in map(flat_span, spans)
             if span["name"] == semconv.TEACHER_SPAN]  # fmt: skip
    by_span: dict[str, list[float]] = {}
    for span in sorted(found, key=lambda s: s["endTimeUnixNano"]):
        attributes = span.get("attributes") or {}
        if attempt_id and attributes.get(semconv.AGL_TEACHER_ATTEMPT) not in (attempt_id, ""):
            continue
        for span_id in attributes.get(semconv.AGL_TEACHER_SPAN_IDS) or ():
            by_span[span_id] = [float(value) for value in attributes.get(semconv.AGL_TEACHER_LOGPROBS) or ()]
    return by_span


def _teacher_of(teacher: dict[str, list[float]], spans: Sequence[Span], tokens: int) -> list[float] | None:
    """The teacher's logprobs of a call's response tokens, scored under one of its copies' span ids."""
    return next((scored for span in spans if tokens and len(scored := teacher.get(span["spanId"], [])) == tokens), None)


def _messages(attributes: dict[str, Any], key: str) -> Any:
    value = attributes.get(key)
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _call_view(span: Span, decision: dict[str, Any] | None, policy_version: int | None, settings: ViewSettings,
               credit: dict[str, Any] | None = None, copies: Sequence[Span] = (),
               teacher: dict[str, list[float]] | None = None) -> dict[str, Any]:  # fmt: skip
    attributes = span.get("attributes") or {}
    with_messages = span_with_messages(span, copies).get("attributes") or {}
    prompt = list(attributes.get(semconv.AGL_PROMPT_TOKEN_IDS) or [])
    response = list(attributes.get(semconv.AGL_RESPONSE_TOKEN_IDS) or [])
    text = settings.token_text
    return {
        "span_id": span["spanId"],
        "name": span["name"],
        "agent": attributes.get(semconv.GEN_AI_AGENT_NAME),
        "model": attributes.get(semconv.GEN_AI_RESPONSE_MODEL) or attributes.get(semconv.GEN_AI_REQUEST_MODEL),
        "service": span.get("service"),
        "response_id": attributes.get(semconv.GEN_AI_RESPONSE_ID),
        "policy_version": policy_version,
        "policy": next(
            (
                a[semconv.AGL_LLM_POLICY]
                for a in (attributes, *(c.get("attributes") or {} for c in copies))
                if semconv.AGL_LLM_POLICY in a
            ),
            None,
        ),  # a policy per agent: the one that served it
        "token_ids_complete": attributes.get(semconv.AGL_TOKEN_IDS_COMPLETE),
        "prompt_token_ids": prompt,
        "response_token_ids": response,
        "response_logprobs": list(attributes.get(semconv.AGL_RESPONSE_LOGPROBS) or []),
        # on-policy distillation: the teacher's logprob of each response token (None: not scored, or the sample
        # spanned more than this call's tokens)
        "teacher_logprobs": _teacher_of(teacher or {}, (span, *copies), len(response)),
        "prompt_pieces": text.pieces(prompt) if text else None,
        "response_pieces": text.pieces(response) if text else None,
        "input_messages": _messages(with_messages, semconv.GEN_AI_INPUT_MESSAGES),
        "output_messages": _messages(with_messages, semconv.GEN_AI_OUTPUT_MESSAGES),
        "copies": [{"span_id": c["spanId"], "service": c.get("service"), "name": c["name"]} for c in copies],
        "decision": decision,
        "credit": credit,  # its return and advantages as the run computed them (None: not trained, or not known)
    }


_BULKY = (semconv.AGL_PROMPT_TOKEN_IDS, semconv.AGL_RESPONSE_TOKEN_IDS, semconv.AGL_RESPONSE_LOGPROBS,
          semconv.GEN_AI_INPUT_MESSAGES, semconv.GEN_AI_OUTPUT_MESSAGES)  # fmt: skip


def _tree_span(span: Span) -> dict[str, Any]:
    """A span for the waterfall: token ids and message content live in `calls`, not twice in the answer; its log
    records (shown under it) with their attributes."""
    attributes = {k: v for k, v in (span.get("attributes") or {}).items() if k not in _BULKY}
    logs = [event for event in span.get("events") or [] if event.get("log")]
    return {**{k: v for k, v in span.items() if k not in ("attributes", "events", "seq")}, "attributes": attributes,
            "logs": logs}  # fmt: skip


def _links(spans: list[Span], settings: ViewSettings) -> list[dict[str, str]]:
    links = []
    for trace_id in dict.fromkeys(span["traceId"] for span in spans):
        if settings.jaeger_ui_url:
            links.append({"ui": "Jaeger", "trace_id": trace_id,
                          "url": f"{settings.jaeger_ui_url.rstrip('/')}/trace/{trace_id}"})  # fmt: skip
        if settings.phoenix_ui_url:
            links.append({"ui": "Phoenix", "trace_id": trace_id,
                          "url": f"{settings.phoenix_ui_url.rstrip('/')}/redirects/traces/{trace_id}"})  # fmt: skip
    return links


async def _group_credits(
    store: SpanStore,
    record: dict[str, Any],
    adapted: AdaptedRollout | None,
    adapter: TraceToTriplet,
    estimator: dict[str, Any] | None,
) -> dict[str, dict[str, Any]]:
    """The credit of this rollout's trained calls: computed over its whole GRPO group, as the trainer did (only the
    final attempt of a rollout is trained, so another attempt's calls get none)."""
    if estimator is None or adapted is None or record["attempt_id"] != record.get("final_attempt_id"):
        return {}
    siblings = await store.state_transaction(lambda tx: group_records(tx, record["group_id"]))
    entries: list[tuple[dict[str, Any], AdaptedRollout | None]] = []
    for sibling in siblings:
        if sibling["rollout_id"] == record["rollout_id"]:
            entries.append((sibling, adapted))
        elif sibling["attempt_id"]:
            entries.append((sibling, (await _adapted(store, sibling, adapter))[1]))
    return credits_by_span(entries, estimator)


async def rollout_view(
    store: SpanStore,
    rollout_id: str,
    settings: ViewSettings,
    *,
    attempt_id: str | None = None,
    agent_match: str | EllipsisType | None = ...,
) -> dict[str, Any]:
    """One rollout: its queue record and attempts, the span tree of one attempt, every LLM call explained."""
    detail = await store.state_transaction(lambda tx: get_rollout_detail(tx, rollout_id))
    metadata = detail["metadata"] or {}
    pattern = recorded_adapter(metadata).get("agent_match") if agent_match is ... else agent_match
    attempt_id = attempt_id or detail["attempt_id"]
    attempt = next((a for a in detail["attempt_list"] if a["attempt_id"] == attempt_id), None)
    if attempt_id and attempt is None:
        raise NotFound(f"rollout {rollout_id!r} has no attempt {attempt_id!r}")
    record = {**detail, "attempt_id": attempt_id, "final_attempt_id": detail["attempt_id"]}
    spans: list[Span] = []
    adapted = None
    adapter = adapter_of(metadata, agent_match=pattern)
    if attempt_id:
        spans, adapted = await _adapted(store, record, adapter)
    decisions = {d.span_id: d.to_json() for d in adapted.diagnostics.calls} if adapted else {}
    credits = await _group_credits(store, record, adapted, adapter, recorded_training(metadata)["estimator"])
    version = metadata.get("policy_version", attempt["resources_version"] if attempt else None)
    llm_spans = {
        span["spanId"]: span
        for span in sorted(spans, key=lambda s: s["startTimeUnixNano"])
        if (span.get("attributes") or {}).get(semconv.GEN_AI_OPERATION_NAME) in semconv.LLM_OPERATIONS
    }
    # A call recorded twice (the agent's client and the policy gateway: one response id) is one card, the copy the
    # adapter used, with the other copies named on it.
    copies: dict[str, list[Span]] = {}
    for decision in adapted.diagnostics.calls if adapted else []:
        if decision.why[0] in ("duplicate", "harness") and decision.span_id in llm_spans:
            copies.setdefault(str(decision.why[1]), []).append(llm_spans.pop(decision.span_id))
    teacher = await _teacher_logprobs(store, rollout_id, attempt_id) if adapted else {}
    calls = [
        _call_view(
            span, decisions.get(span_id), version, settings, credits.get(span_id), copies.get(span_id, []), teacher
        )
        for span_id, span in llm_spans.items()
    ]
    return {
        "rollout": {k: v for k, v in detail.items() if k != "attempt_list"},
        "run_id": metadata.get("run_id"),
        "step": metadata.get("step"),
        "attempts": detail["attempt_list"],
        "attempt_id": attempt_id,
        "agent_match": pattern,
        "run_agent_match": recorded_adapter(metadata).get("agent_match"),  # the run's own, for the box
        "spans": [_tree_span(span) for span in sorted(spans, key=lambda s: s["startTimeUnixNano"])],
        "calls": calls,
        "samples": [asdict(triplet) for triplet in adapted.triplets] if adapted else [],
        "final_reward": adapted.final_reward if adapted else None,
        "no_sample_reason": _no_sample_reason(record, adapted, pattern),
        "links": _links(spans, settings),
        # log records of the attempt that name no span (a harness's own events): listed apart
        "logs": await rollout_logs_without_span(store, rollout_id, attempt_id) if attempt_id else [],
        "tokenizer": settings.token_text.label if settings.token_text else None,
    }
