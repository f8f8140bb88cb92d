"""Why a batch gave no (or few) training samples, in words a user can act on; and the errors that end such runs.

A run that trains nothing must not look like a run that trained: `Trainer.dev` raises `AllRolloutsFailed` when no
rollout succeeded, a training algorithm raises `NothingTrained` when no step had a sample, and every skipped step
logs `why_no_samples(...)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lightning_otel.runtime.rollout_batch import BatchResult


class AllRolloutsFailed(RuntimeError):
    """No rollout of the run succeeded."""


class NothingTrained(RuntimeError):
    """A training run ended without one step that had a trainable sample."""


def _records(results: Sequence[BatchResult]) -> list[dict]:
    return [record for result in results for record in result.rollouts]


def first_error(results: Sequence[BatchResult]) -> str | None:
    return next((record["error"] for record in _records(results) if record.get("error")), None)


def all_failed(results: Sequence[BatchResult]) -> bool:
    records = _records(results)
    return bool(records) and not any(record["status"] == "succeeded" for record in records)


def failure_summary(results: Sequence[BatchResult]) -> str:
    records = _records(results)
    statuses = [record["status"] for record in records]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))
    return f"all {len(records)} rollouts ended without success ({counts}); first error: {first_error(results)}"


def why_no_samples(
    results: Sequence[BatchResult],
    agent_match: str | None,
    *,
    late_spans: Callable[[BatchResult], int] | None = None,
) -> list[str]:
    """What stood between the batches' rollouts and training samples, most fundamental first. `late_spans` (e.g.
    `TrainingRun.late_spans`) tells rollouts whose spans were still arriving from an uninstrumented client."""
    records = _records(results)
    adapted = [item for result in results for item in result.adapted.values()]
    reasons: list[str] = []
    unsuccessful = [record for record in records if record["status"] != "succeeded"]
    if unsuccessful:
        reasons.append(
            f"{len(unsuccessful)} of {len(records)} rollouts did not succeed; first error: {first_error(results)}"
        )
    if not adapted:
        return reasons or ["no rollout ran"]
    calls = sum(item.diagnostics.llm_calls for item in adapted)
    incomplete = sum(len(result.incomplete) for result in results)
    late = sum(late_spans(result) for result in results) if calls == 0 and late_spans is not None else 0
    if calls == 0 and (incomplete or late):
        reasons.append(
            f"the {len(adapted)} succeeded rollouts had no LLM call when they were read, but their spans were still "
            f"arriving ({incomplete} read with parents missing, {late} more spans stored since): the agent's process "
            "exports late (an agent service's SDK sends every 5 s by default). Raise span_wait_s, or flush its spans "
            "before it answers (lightning_otel.flush())"
        )
        return reasons
    if calls == 0:
        reasons.append(
            f"the {len(adapted)} succeeded rollouts recorded no LLM call: is the agent's client instrumented "
            "(import lightning_otel.auto, or a supported framework), and does it call the LLM resource it was given?"
        )
        return reasons
    matched = sum(item.diagnostics.matched_calls for item in adapted)
    if matched == 0:
        agents = sorted({name for item in adapted for name in item.diagnostics.agents_seen})
        rollout_agents = sorted({name for item in adapted for name in item.diagnostics.rollout_agents})
        reasons.append(
            f"agent_match={agent_match!r} selected none of {calls} LLM calls: it must find (re.search) an agent "
            f"seen around a call {agents} or the rollout's agent {rollout_agents}"
        )
        return reasons
    without_ids = sum(item.diagnostics.calls_without_token_ids for item in adapted)
    if without_ids == matched:
        reasons.append(
            f"none of the {matched} selected LLM calls has token ids: the endpoint must return them (vLLM >= 0.10.2 "
            "`return_token_ids`, the policy gateway, or the test server) and be registered as trainable"
        )
    elif without_ids:
        reasons.append(f"{without_ids} of {matched} selected LLM calls have no token ids")
    rewardless = [rollout_id for result in results for rollout_id, reward in result.rewards().items() if reward is None]
    if rewardless:
        reasons.append(
            f"{len(rewardless)} succeeded rollouts have no reward: return a float from rollout() or emit_reward()"
        )
    return reasons
