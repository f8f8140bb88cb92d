"""The chaos run's checker (`benchmarks.chaos`): what the store (PostgreSQL) and the run folder say after the run,
and each property the run must hold, with what it saw."""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.chaos import ChaosRun

MAX_STALENESS = 1  # the training's --max-staleness
RUNNER_CAUSES = {"infrastructure:runner_lost", "infrastructure:no_heartbeat", "infrastructure:runner_stopped"}


def read_records(run: ChaosRun) -> dict[str, Any]:
    """The store's rollouts, attempts, trained steps (each step's last `agl.training.step` span) and span counts."""
    import psycopg
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    from lightning_otel.collector.receiving.otlp_json import native_attributes

    with psycopg.connect(run.store) as connection:
        attempts = {(r, a): {"status": s, "cause": c, "runner": rid, "number": n} for r, a, s, c, rid, n in
                    connection.execute("SELECT rollout_id, attempt_id, status, cause, runner_id, number "
                                       "FROM agl_attempts")}  # fmt: skip
        steps: dict[int, dict[str, Any]] = {}
        for (raw,) in connection.execute("SELECT span FROM agl_spans WHERE name = 'agl.training.step' ORDER BY end_ns"):
            attributes = native_attributes(Span.FromString(raw).attributes)
            steps[int(attributes["agl.training.step"])] = attributes  # the later record of a step wins
        chat = Counter()
        for rollout, attempt, _service, count in connection.execute(
            "SELECT rollout_id, attempt_id, service, count(*) FROM agl_spans WHERE operation = 'chat' "
            "AND service <> 'agl-policy-gateway' GROUP BY 1, 2, 3"
        ):
            chat[(rollout, attempt)] += count
        twice = connection.execute("SELECT count(*) FROM (SELECT trace_id, span_id FROM agl_spans GROUP BY 1, 2 "
                                   "HAVING count(*) > 1) d").fetchone()[0]  # fmt: skip
        rollouts = dict(Counter(s for (s,) in connection.execute("SELECT status FROM agl_rollouts")))
        spans = connection.execute("SELECT count(*) FROM agl_spans").fetchone()[0]
    return {"attempts": attempts, "steps": steps, "chat": chat, "twice": twice, "rollouts": rollouts, "spans": spans}


def check(run: ChaosRun, records: dict[str, Any], trainer_log: str, free_rewards: list[float]) -> dict[str, Any]:
    """Every property the issue asks for: (name, held, what it saw)."""
    steps, attempts = records["steps"], records["attempts"]
    metrics = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    last: dict[int, dict[str, Any]] = {}
    for line in metrics:
        if "training/samples" in line:
            last[int(line["step"])] = line  # a step redone after a resume: its later record
    numbers = sorted(last)
    checks: list[tuple[str, bool, str]] = []
    tied = [n for n in numbers if last[n]["training/skipped_step"]]  # every group's rewards equal: nothing to learn
    # each of a step's rollouts gave its sample, or failed with its cause (retries spent), counted in the step
    unaccounted = [n for n in numbers if n not in steps or last[n]["rollout/with_samples"] + last[n]["rollout/failed"]
                   + last[n]["rollout/timeout"] != last[n]["rollout/rollouts"]]  # fmt: skip
    given_up = sum(last[n]["rollout/failed"] + last[n]["rollout/timeout"] for n in numbers)
    checks.append(("every step up to the last recorded, each of its rollouts a sample or a failure with its cause, "
                   "trained unless its groups tied", bool(numbers) and numbers == list(range(1, numbers[-1] + 1))
                   and not unaccounted, f"{len(numbers)} steps in metrics.jsonl, {len(set(steps) & set(numbers))} "
                   f"step spans; unaccounted: {unaccounted[:5]}; rollouts failed after their retries: {given_up:g}; "
                   f"steps skipped because every group tied: {len(tied)}"))  # fmt: skip
    trained_in: dict[str, set[int]] = {}
    samples = []
    for number in numbers:
        span = steps.get(number, {})
        rows = zip(span.get("agl.training.trained.rollout_ids") or [], span.get("agl.training.trained.attempt_ids")
                   or [], span.get("agl.training.trained.policy_versions") or [], strict=True)  # fmt: skip
        version = int(span.get("agl.metric.training/policy_version", -99))
        for rollout, attempt, sampled in rows:
            trained_in.setdefault(rollout, set()).add(number)
            samples.append((number, rollout, attempt, int(sampled), version))
    per_rollout = Counter((number, rollout) for number, rollout, _, _, _ in samples)
    extra = [key for key, count in per_rollout.items() if count != 1]  # the agent makes one writer call a rollout
    checks.append(("one sample a trained rollout (its one writer call; no answer the agent never received)",
                   not extra, f"rollouts with other than one: {extra[:5]}"))  # fmt: skip
    twice = {rollout: sorted(at) for rollout, at in trained_in.items() if len(at) > 1}
    checks.append(("no rollout trained in two steps", not twice, f"{len(trained_in)} rollouts trained; in two "
                   f"steps: {dict(list(twice.items())[:5])}"))  # fmt: skip
    not_succeeded = [(r, a, attempts.get((r, a), {}).get("status")) for _, r, a, _, _ in samples
                     if attempts.get((r, a), {}).get("status") != "succeeded"]  # fmt: skip
    checks.append(("every trained sample from a succeeded attempt", not not_succeeded,
                   f"{len(samples)} samples; from other attempts: {not_succeeded[:5]}"))  # fmt: skip
    missing = [(r, a, records["chat"].get((r, a), 0)) for r, a in {(r, a) for _, r, a, _, _ in samples}
               if records["chat"].get((r, a), 0) != 2]  # fmt: skip
    checks.append(("the agent's 2 LLM calls stored for every trained attempt", not missing,
                   f"attempts without exactly 2: {missing[:5]}"))  # fmt: skip
    checks.append(("no span stored twice", records["twice"] == 0, f"{records['spans']} spans, {records['twice']} "
                   "stored twice"))  # fmt: skip
    stale = [(n, v, s) for n, _, _, s, v in samples if s < 0 or v - s > MAX_STALENESS or s > v]
    checks.append((f"every sample's policy version within {MAX_STALENESS} of its step's", not stale,
                   f"outside: {stale[:5]}"))  # fmt: skip
    kills = sum(1 for fault in run.faults if fault["kind"] == "kill_trainer")
    others = [fault["at_s"] for fault in run.faults if fault["kind"] == "trainer_killed_by_another"]
    resumes = trainer_log.count("resumed        after the latest checkpoint")
    checks.append(("each trainer kill followed by a resume", resumes == kills + len(others),
                   f"{kills} kills, {len(others)} by another, {resumes} resumes"))  # fmt: skip
    checks.append(("the trainer died only of the nemesis's kills", not others,
                   f"SIGKILLs it did not send, at {others} s" if others else "none other"))  # fmt: skip
    unresolved = [(key, attempts.get(key)) for key in run.killed_attempts
                  if not _ended_by_infrastructure(attempts.get(key))]  # fmt: skip
    checks.append(("attempts running on a killed local runner ended with an infrastructure cause", not unresolved,
                   f"{len(run.killed_attempts)} attempts killed; otherwise: {unresolved[:5]}"))  # fmt: skip
    chaos_rewards = [last[n]["rollout/reward_mean"] for n in numbers if math.isfinite(last[n]["rollout/reward_mean"])]
    k = min(len(chaos_rewards), len(free_rewards))
    if k >= 2:
        a, b = chaos_rewards[:k], free_rewards[:k]
        se = math.sqrt(statistics.variance(a) / k + statistics.variance(b) / k) or 1e-9
        gap = (statistics.fmean(a) - statistics.fmean(b)) / se
        saw = f"{statistics.fmean(a):.3f} vs {statistics.fmean(b):.3f} over {k} steps ({gap:+.1f} SE)"
        checks.append(("training reward within 3 SE of the fault-free run's", abs(gap) <= 3, saw))
    causes = Counter(v["cause"] or v["status"] for v in attempts.values() if v["status"] != "succeeded")
    logs = {path.stem: path.read_text(errors="replace") for path in run.folder.glob("*.log")}
    train_log = run.run_dir / "train.log"  # the trainer's other libraries (Ray's actor messages among them)
    logs["train"] = train_log.read_text(errors="replace") if train_log.exists() else ""
    policy = sum(n for cause, n in causes.items() if cause.startswith("infrastructure:") and cause not in RUNNER_CAUSES)
    said = lambda text: sum(log.count(text) for log in logs.values())  # noqa: E731
    visible = {  # each kind of fault, and the lines or records that say it (counted, not every fault shows)
        "kill_trainer": f"{resumes} 'resumed' lines",
        "kill_local_runner": f"{causes.get('infrastructure:runner_lost', 0)} attempts infrastructure:runner_lost",
        "kill_ray_runner": f"{said('Ray actor')} 'Ray actor ...' lines",
        "kill_collector/stop_collector": f"{said('unreachable')} 'unreachable' and {said('answers again')} 'answers "
                                         "again' lines",
        "stop_database": f"{said('store unavailable') + said('database')} store/database lines",
        "policy faults": f"{policy} attempts with the policy's error as their infrastructure cause",
    }  # fmt: skip
    retried = sum(1 for v in attempts.values() if v["number"] > 1)
    return {"checks": [{"check": name, "held": held, "saw": saw} for name, held, saw in checks],
            "steps": len(numbers), "rollouts": records["rollouts"], "attempts": len(attempts), "retried": retried,
            "causes": dict(causes), "samples": len(samples), "visible": visible}  # fmt: skip


def _ended_by_infrastructure(row: dict[str, Any] | None) -> bool:
    """An attempt that did not succeed, failed for the infrastructure or cancelled with its rollout."""
    if row is None or row["status"] == "succeeded":
        return False
    return row["status"] == "cancelled" or (row["cause"] or "").startswith("infrastructure")
