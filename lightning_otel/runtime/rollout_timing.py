"""Where a rollout's time goes, read from what the run already stores: the queue's timestamps (enqueued, claimed,
completed) and the attempt's spans. No timer in the hot path, so measuring costs nothing and works on any stored run.

    detail = client.rollout(rollout_id)                 # the queue record with its `attempt_list`
    phases = attempt_phases(detail, spans)              # seconds: queued, to_agent, agent, llm, to_complete, ...
    print(format_breakdown(breakdown([phases, ...])))   # medians and means in ms, one line a phase
    batch_pace([detail, ...])                           # the batch's start-up and its pace once running

Phases of the attempt that succeeded (its spans are the ones the batch read):
- `queued`: enqueued -> claimed by a runner (waiting for a free slot, then the claim's round trip);
- `to_agent`: claimed -> the attempt's first span starts (the runner hands the task to the agent);
- `agent`: first span start -> last span end (the agent's own run, its LLM calls included);
- `llm`: the time inside LLM call spans (overlapping calls, or a call seen by both the client and the gateway,
  counted once), part of `agent`;
- `to_complete`: last span end -> the completion reached the queue (span flush, the reward, the report);
- `attempt`: claimed -> completed.
Times come from two clocks, the collector's (queue) and the runner's (spans): on one machine they are one clock;
across machines their skew shows up in `to_agent` and `to_complete`.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lightning_otel import semconv

PHASES = ("queued", "to_agent", "agent", "llm", "to_complete", "attempt")


def _union_seconds(intervals: Iterable[tuple[int, int]]) -> float:
    """Length of the union of [start, end) intervals in ns, in seconds."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total / 1e9


def attempt_phases(detail: Mapping[str, Any], spans: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
    """Seconds per phase (see the module docstring) of the rollout's succeeded attempt; None when it has no
    succeeded attempt or no span."""
    succeeded = [a for a in detail.get("attempt_list", ()) if a.get("status") == "succeeded" and a.get("end_ns")]
    if not succeeded or not spans:
        return None
    attempt = succeeded[-1]
    first = min(int(span["startTimeUnixNano"]) for span in spans)
    last = max(int(span["endTimeUnixNano"]) for span in spans)
    calls = [
        (int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"]))
        for span in spans
        if (span.get("attributes") or {}).get(semconv.GEN_AI_OPERATION_NAME) in semconv.LLM_OPERATIONS
    ]
    claimed, completed = int(attempt["start_ns"]), int(attempt["end_ns"])
    return {
        "queued": (claimed - int(detail["created_ns"])) / 1e9,
        "to_agent": (first - claimed) / 1e9,
        "agent": (last - first) / 1e9,
        "llm": _union_seconds(calls),
        "to_complete": (completed - last) / 1e9,
        "attempt": (completed - claimed) / 1e9,
    }


def breakdown(timings: Iterable[Mapping[str, float] | None]) -> dict[str, dict[str, float]]:
    """Per phase: median and mean in ms over the attempts that have timings, and their count."""
    kept = [timing for timing in timings if timing is not None]
    if not kept:
        return {}
    return {
        phase: {
            "median_ms": statistics.median(t[phase] for t in kept) * 1000,
            "mean_ms": statistics.fmean(t[phase] for t in kept) * 1000,
            "attempts": float(len(kept)),
        }
        for phase in PHASES
    }


def batch_pace(details: Sequence[Mapping[str, Any]], middle: tuple[float, float] = (0.2, 0.8)) -> dict[str, float]:
    """A batch's start and its pace once running, from its queue records (`client.rollout(id)` each):
    `first_claim_s`, the batch queued -> its first claim (runners starting, importing the agent); `steady_per_s`,
    completions a second between the `middle` fractions of the batch's completions (start and drain left out);
    `drain_s`, the last claim -> the last completion. Empty when fewer than 10 attempts succeeded."""
    queued = min((int(d["created_ns"]) for d in details), default=0)
    succeeded = [a for d in details for a in d.get("attempt_list", ()) if a.get("status") == "succeeded"]
    if len(succeeded) < 10:
        return {}
    claims = sorted(int(a["start_ns"]) for d in details for a in d.get("attempt_list", ()) if a.get("start_ns"))
    ends = sorted(int(a["end_ns"]) for a in succeeded)
    low, high = (int(fraction * (len(ends) - 1)) for fraction in middle)
    return {
        "first_claim_s": (claims[0] - queued) / 1e9,
        "steady_per_s": (high - low) / max((ends[high] - ends[low]) / 1e9, 1e-9),
        "drain_s": (ends[-1] - claims[-1]) / 1e9,
    }


def format_breakdown(table: Mapping[str, Mapping[str, float]], indent: str = "  ") -> str:
    """The table as lines: phase, median and mean in ms."""
    if not table:
        return f"{indent}(no attempt with spans and a completion)"
    count = int(next(iter(table.values()))["attempts"])
    lines = [f"{indent}{'per attempt (' + str(count) + ')':<22}{'median ms':>10}{'mean ms':>10}"]
    for phase, row in table.items():
        lines.append(f"{indent}{phase:<22}{row['median_ms']:>10.1f}{row['mean_ms']:>10.1f}")
    return "\n".join(lines)
