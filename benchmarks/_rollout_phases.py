"""Where a training run's rollouts spent their time, read after the run from the collector the Trainer used (the
queue's timestamps and the spans: `lightning_otel.runtime.rollout_timing`), per attempt and per batch.

    with EmbeddedCollector.on_sqlite_file(path) as addresses:
        Trainer(..., collector=addresses.query).fit(...)
        print(format_run_phases(run_phases(addresses.query, skip_batches=2)))

Per batch (the rollouts one enqueue made, i.e. one step's), the critical path: `claimed` (enqueue -> the last
rollout claimed), `agents` (the first claim -> the last agent's last span), `reported` (-> the last completion
reached the queue). The loop's own `timing_s/gen` adds the trainer's wait to notice and the read + adapt.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from lightning_otel.collector import Client
from lightning_otel.runtime.rollout_timing import attempt_phases, breakdown, format_breakdown

BATCH_PHASES = ("claimed", "agents", "reported", "rollouts")


def _all_rollouts(client: Client) -> list[dict[str, Any]]:
    records, after = [], None
    while True:
        page = client.rollouts_page(after=after, limit=500)
        records.extend(page["rollouts"])
        after = page.get("next")
        if not after:
            return records


def run_phases(query_url: str, *, skip_batches: int = 0) -> dict[str, Any]:
    """Per-attempt phases (medians/means) and per-batch critical paths (means), over the batches after the first
    `skip_batches` (start-up)."""
    with Client(query_url) as client:
        by_batch: dict[int, list[str]] = {}
        for record in _all_rollouts(client):
            if record.get("mode", "train") == "train":
                by_batch.setdefault(int(record["created_ns"]), []).append(record["rollout_id"])
        batches = [by_batch[created] for created in sorted(by_batch)][skip_batches:]
        ids = [rollout_id for batch in batches for rollout_id in batch]
        spans = client.rollouts_spans(ids, latest=True) if ids else {}
        details = {rollout_id: client.rollout(rollout_id) for rollout_id in ids}
    attempts = {rollout_id: attempt_phases(details[rollout_id], spans.get(rollout_id, [])) for rollout_id in ids}
    critical: list[dict[str, float]] = []
    for batch in batches:  # one enqueue: every phase below counts from the same created_ns
        timed = [phases for phases in (attempts[rollout_id] for rollout_id in batch) if phases is not None]
        if not timed:
            continue
        claims = [p["queued"] for p in timed]
        last_spans = [p["queued"] + p["to_agent"] + p["agent"] for p in timed]
        completions = [p["queued"] + p["attempt"] for p in timed]
        critical.append({
            "claimed": max(claims),
            "agents": max(last_spans) - min(claims),
            "reported": max(completions) - max(last_spans),
            "rollouts": max(completions),
        })  # fmt: skip
    return {
        "attempts": breakdown(attempts.values()),
        "batches": {phase: statistics.fmean(c[phase] for c in critical) * 1000 for phase in BATCH_PHASES}
        if critical
        else {},
        "n_batches": len(critical),
    }


def format_run_phases(phases: Mapping[str, Any], indent: str = "    ") -> str:
    lines = [format_breakdown(phases["attempts"], indent=indent)]
    if phases["batches"]:
        parts = ", ".join(f"{phase} {ms:.0f}" for phase, ms in phases["batches"].items())
        lines.append(f"{indent}per batch, critical path, mean ms over {phases['n_batches']}: {parts}")
    return "\n".join(lines)
