"""Rollout identity: which rollout and attempt the spans started here belong to.

The identity lives in the OpenTelemetry context as W3C baggage (`agl.rollout.id`, `agl.attempt.id`). That one
choice gives three properties at once: asyncio tasks and threads that copy the context keep it and never see
another task's rollout; the standard propagators carry it beside `traceparent` to other processes; and an agent
server that extracts incoming headers gets it back with no extra step.

    with lightning_otel.rollout_context("ro-1", "at-1"):
        run_agent()

    async with lightning_otel.rollout_context("ro-2", "at-1"):
        await run_agent_async()
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import TracebackType

from opentelemetry import baggage, context
from opentelemetry.sdk.trace import Span, SpanProcessor

from lightning_otel import semconv


@dataclass(frozen=True, slots=True)
class RolloutIdentity:
    rollout_id: str
    attempt_id: str


def current_rollout(ctx: context.Context | None = None) -> RolloutIdentity | None:
    """The rollout identity in `ctx` (default: the current context), or None outside a rollout."""
    values = baggage.get_all(ctx)
    rollout_id = values.get(semconv.BAGGAGE_ROLLOUT_ID)
    if rollout_id is None:
        return None
    return RolloutIdentity(str(rollout_id), str(values.get(semconv.BAGGAGE_ATTEMPT_ID, "")))


class RolloutStopped(RuntimeError):
    """An LLM call of an attempt the runner stopped (a limit tripped): refused before it is sent, so an agent that
    loops in a thread the runner cannot cancel stops burning calls, and makes no sample past the stop."""


_stopped: set[tuple[str, str]] = set()
_stopped_lock = threading.Lock()


def stop_attempt(rollout_id: str, attempt_id: str, *, stopped: bool = True) -> None:
    """Mark an attempt stopped (its LLM calls from now on raise `RolloutStopped`), or no longer (`stopped=False`)."""
    with _stopped_lock:
        if stopped:
            _stopped.add((rollout_id, attempt_id))
        else:
            _stopped.discard((rollout_id, attempt_id))


def raise_if_stopped() -> None:
    """Refuse an LLM call made in an attempt the runner stopped (`stop_attempt`)."""
    if not _stopped:
        return
    identity = current_rollout()
    if identity is not None and (identity.rollout_id, identity.attempt_id) in _stopped:
        raise RolloutStopped(f"rollout {identity.rollout_id} attempt {identity.attempt_id} was stopped by a limit")


def context_with_rollout(rollout_id: str, attempt_id: str, ctx: context.Context | None = None) -> context.Context:
    """Return `ctx` (default: current) with the rollout identity set in its baggage."""
    ctx = baggage.set_baggage(semconv.BAGGAGE_ROLLOUT_ID, rollout_id, ctx)
    return baggage.set_baggage(semconv.BAGGAGE_ATTEMPT_ID, attempt_id, ctx)


class rollout_context:
    """Sync and async context manager stamping `agl.rollout.id`/`agl.attempt.id` on every span started inside.

    The context is attached on enter and detached on exit in the same task or thread, so it is safe with
    asyncio: 200 concurrent rollouts in one process each see only their own identity.
    """

    __slots__ = ("_token", "identity")

    def __init__(self, rollout_id: str, attempt_id: str = "") -> None:
        if not rollout_id:
            raise ValueError("rollout_context needs a non-empty rollout_id")
        self.identity = RolloutIdentity(str(rollout_id), str(attempt_id))
        self._token: object | None = None

    def __enter__(self) -> RolloutIdentity:
        if self._token is not None:
            raise RuntimeError("this rollout_context is already entered; create one per `with` block")
        self._token = context.attach(context_with_rollout(self.identity.rollout_id, self.identity.attempt_id))
        return self.identity

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        if token is not None:
            context.detach(token)  # type: ignore[arg-type]

    async def __aenter__(self) -> RolloutIdentity:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


class RolloutStampingProcessor(SpanProcessor):
    """Copies the rollout identity from baggage onto every span at start (`agl.rollout.id`, `agl.attempt.id`).

    Spans that already carry an explicit `agl.rollout.id` (the gateway attributing someone else's call) keep it.
    """

    def __init__(self) -> None:
        self.enabled = True

    def on_start(self, span: Span, parent_context: context.Context | None = None) -> None:
        if not self.enabled:
            return
        values = baggage.get_all(parent_context)
        rollout_id = values.get(semconv.BAGGAGE_ROLLOUT_ID)
        if rollout_id is None and parent_context is not None:
            # Frameworks sometimes build a parent context from scratch, dropping baggage; the current one has it.
            values = baggage.get_all()
            rollout_id = values.get(semconv.BAGGAGE_ROLLOUT_ID)
        if rollout_id is None:
            return
        attributes = span.attributes
        if attributes and semconv.AGL_ROLLOUT_ID in attributes:
            return
        span.set_attribute(semconv.AGL_ROLLOUT_ID, str(rollout_id))
        span.set_attribute(semconv.AGL_ATTEMPT_ID, str(values.get(semconv.BAGGAGE_ATTEMPT_ID, "")))
