"""Where an attempt's time went, from the queue's timestamps and the spans (`runtime/rollout_timing.py`)."""

from __future__ import annotations

import pytest

from lightning_otel.runtime.rollout_timing import attempt_phases, batch_pace, breakdown, format_breakdown

MS = 1_000_000  # ns


def span(start_ms: int, end_ms: int, operation: str | None = None) -> dict:
    attributes = {"gen_ai.operation.name": operation} if operation else {}
    return {"startTimeUnixNano": start_ms * MS, "endTimeUnixNano": end_ms * MS, "attributes": attributes}


def detail(*attempts: dict) -> dict:
    return {"created_ns": 0, "attempt_list": list(attempts)}


def test_phases_of_the_succeeded_attempt_with_overlapping_calls_counted_once() -> None:
    failed = {"status": "failed", "start_ns": 5 * MS, "end_ns": 9 * MS}
    succeeded = {"status": "succeeded", "start_ns": 10 * MS, "end_ns": 100 * MS}
    spans = [
        span(12, 90),  # the agent's span
        span(20, 40, "chat"),  # a call seen by the client ...
        span(22, 38, "chat"),  # ... and by the gateway: inside it, not counted again
        span(35, 50, "text_completion"),  # overlaps the first: the union is 20..50
        span(60, 70, "chat"),
        span(70, 80, "execute_tool"),  # not an LLM call
    ]
    phases = attempt_phases(detail(failed, succeeded), spans)
    assert phases == pytest.approx(
        {"queued": 0.010, "to_agent": 0.002, "agent": 0.078, "llm": 0.040, "to_complete": 0.010, "attempt": 0.090}
    )


def test_no_succeeded_attempt_or_no_span_has_no_phases() -> None:
    running = {"status": "running", "start_ns": 1, "end_ns": None}
    assert attempt_phases(detail(running), [span(1, 2)]) is None
    assert attempt_phases(detail({"status": "succeeded", "start_ns": 1, "end_ns": 5 * MS}), []) is None


def test_breakdown_takes_medians_and_means_over_the_attempts_that_have_phases() -> None:
    phases = [
        {"queued": 0.001, "to_agent": 0.0, "agent": 0.010, "llm": 0.008, "to_complete": 0.002, "attempt": 0.012},
        {"queued": 0.003, "to_agent": 0.0, "agent": 0.030, "llm": 0.020, "to_complete": 0.004, "attempt": 0.034},
        None,
    ]
    table = breakdown(phases)
    assert table["agent"] == pytest.approx({"median_ms": 20.0, "mean_ms": 20.0, "attempts": 2.0})
    assert "per attempt (2)" in format_breakdown(table)
    assert breakdown([None]) == {}
    assert "no attempt" in format_breakdown({})


def test_batch_pace_separates_the_start_from_the_steady_pace_and_the_drain() -> None:
    # 101 rollouts queued at 0; the first claimed at 1 s (runners starting); then one completes every 10 ms
    # (claimed 50 ms before), except that the last one takes 200 ms
    details = []
    for index in range(101):
        end_ms = 1_050 + 10 * index + (150 if index == 100 else 0)
        attempt = {"status": "succeeded", "start_ns": (1_000 + 10 * index) * MS, "end_ns": end_ms * MS}
        details.append(detail({"status": "failed", "start_ns": 900 * MS, "end_ns": 950 * MS}, attempt))
    pace = batch_pace(details)
    assert pace["first_claim_s"] == pytest.approx(0.9)  # a failed attempt's claim counts: the runners were up
    assert pace["steady_per_s"] == pytest.approx(100.0)
    assert pace["drain_s"] == pytest.approx(0.2)
    assert batch_pace(details[:9]) == {}
