"""`AttemptWatch`: a span processor in the runner process that reads each running attempt's spans as they end and
stops a rollout that is hung or makes no progress, and notes the infrastructure failures its agent swallowed.

Per-rollout limits (`RolloutLimits`, in `RunnerOptions.limits`): LLM calls, completion tokens, and the no-progress
rules: the same completion (the same response token ids: the same tool call with the same arguments, the same
answer) `max_repeats` times in a row, `max_empty` empty completions, `max_without_tool_call` calls in a row that
offered tools and got no tool call. Wall time is the queue's (`rollout_timeout_s`).
A rollout that trips a rule is stopped (its task cancelled) and marked `policy:<rule>`: it trains with the
policy-failure reward. An LLM or tool call that failed for the infrastructure (its `error.type` a connection error,
a timeout, a 5xx) marks the attempt `infrastructure:<error>` even when the agent carried on: it is retried, not
trained as whatever reward the agent gave without it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from lightning_otel import semconv
from lightning_otel.runner.failure_causes import cause_of_error_type


@dataclass(frozen=True, slots=True)
class RolloutLimits:
    """Per-rollout limits a normal run never trips (None: no limit): `max_llm_calls`, `max_completion_tokens`
    (summed over the rollout's calls), `max_repeats` (the same completion this many times in a row), `max_empty`
    (this many empty completions), `max_without_tool_call` (this many calls in a row that offered tools and got
    none called)."""

    max_llm_calls: int | None = 500
    max_completion_tokens: int | None = 1_000_000
    max_repeats: int | None = 8
    max_empty: int | None = 8
    max_without_tool_call: int | None = 25

    def __post_init__(self) -> None:
        for name in ("max_llm_calls", "max_completion_tokens", "max_repeats", "max_empty", "max_without_tool_call"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None (no limit), got {value}")


@dataclass(slots=True)
class AttemptObservations:
    """What one attempt's spans showed so far."""

    llm_calls: int = 0
    completion_tokens: int = 0
    repeats: int = 0  # how many times in a row the latest completion came
    empty: int = 0
    without_tool_call: int = 0  # calls in a row that offered tools and got no tool call
    last_completion: tuple[int, ...] | None = None
    infrastructure: list[str] = field(default_factory=list)  # causes seen on failed calls
    tripped: str | None = None  # the cause of a rule that fired


class AttemptWatch(SpanProcessor):
    """Watches the attempts `watch` registered; `on_trip(cause)` is called once, from the thread that ended the span,
    when a limit trips."""

    def __init__(self, limits: RolloutLimits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._watched: dict[tuple[str, str], tuple[AttemptObservations, Callable[[str], None]]] = {}

    def watch(self, rollout_id: str, attempt_id: str, on_trip: Callable[[str], None]) -> AttemptObservations:
        seen = AttemptObservations()
        with self._lock:
            self._watched[(rollout_id, attempt_id)] = (seen, on_trip)
        return seen

    def forget(self, rollout_id: str, attempt_id: str) -> None:
        with self._lock:
            self._watched.pop((rollout_id, attempt_id), None)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        attributes = span.attributes or {}
        key = (str(attributes.get(semconv.AGL_ROLLOUT_ID, "")), str(attributes.get(semconv.AGL_ATTEMPT_ID, "")))
        with self._lock:
            found = self._watched.get(key)
            if found is None:
                return
            seen, on_trip = found
            tripped = self._observe(seen, span, attributes)
        if tripped is not None:
            on_trip(tripped)

    def _observe(self, seen: AttemptObservations, span: ReadableSpan, attributes: object) -> str | None:
        get = attributes.get  # type: ignore[attr-defined]
        operation = get(semconv.GEN_AI_OPERATION_NAME)
        if span.status.status_code == StatusCode.ERROR and operation in (*semconv.LLM_OPERATIONS,
                                                                          semconv.OP_EXECUTE_TOOL):  # fmt: skip
            cause = cause_of_error_type(str(get(semconv.ERROR_TYPE, "")))
            if cause is not None:
                seen.infrastructure.append(cause)
            return None
        if operation not in semconv.LLM_OPERATIONS:
            return None
        seen.llm_calls += 1
        completion = tuple(get(semconv.AGL_RESPONSE_TOKEN_IDS) or ())
        tokens = get(semconv.GEN_AI_USAGE_OUTPUT_TOKENS)
        seen.completion_tokens += int(tokens) if isinstance(tokens, int) else len(completion)
        empty = not completion and not tokens
        seen.empty += int(empty)
        if completion and completion == seen.last_completion:
            seen.repeats += 1
        else:
            seen.repeats = 1 if completion else 0
        seen.last_completion = completion or None
        if get(semconv.AGL_TOOLS_OFFERED):
            called = semconv.TOOL_CALL_FINISH_REASONS & set(get(semconv.GEN_AI_RESPONSE_FINISH_REASONS) or ())
            seen.without_tool_call = 0 if called else seen.without_tool_call + 1
        if seen.tripped is None:
            seen.tripped = self._rule_tripped(seen)
            return seen.tripped
        return None

    def _rule_tripped(self, seen: AttemptObservations) -> str | None:
        limits = self.limits
        if limits.max_llm_calls is not None and seen.llm_calls > limits.max_llm_calls:
            return f"policy:too_many_llm_calls (over {limits.max_llm_calls})"
        if limits.max_completion_tokens is not None and seen.completion_tokens > limits.max_completion_tokens:
            return f"policy:too_many_completion_tokens (over {limits.max_completion_tokens})"
        if limits.max_repeats is not None and seen.repeats >= limits.max_repeats:
            return f"policy:repeated_completion ({seen.repeats} times in a row)"
        if limits.max_empty is not None and seen.empty >= limits.max_empty:
            return f"policy:empty_completions ({seen.empty})"
        if limits.max_without_tool_call is not None and seen.without_tool_call >= limits.max_without_tool_call:
            return f"policy:no_tool_call ({seen.without_tool_call} calls in a row offered tools)"
        return None

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


__all__ = ["AttemptObservations", "AttemptWatch", "RolloutLimits"]
