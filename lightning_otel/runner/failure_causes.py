"""The cause of a failed or suspect attempt, from the agent's exception and the attempt's own spans
(`attempt_watch`): infrastructure (retried, never trained) or policy (trained with the policy-failure reward).

Rules are asked in order: the agent's (`agl.failure_rule`), then `InfrastructureError`/`PolicyError`, then the
built-in ones, by the exception's class names (its library need not be importable here):
- infrastructure: a connection refused or broken, a timeout, an HTTP 5xx or 429 from the policy's server or a tool's
  (openai's and LiteLLM's `APIConnectionError`, `APITimeoutError`, `InternalServerError`, `RateLimitError`,
  `ServiceUnavailableError`; httpx's and the standard library's connection and timeout errors);
- infrastructure too: any exception carrying an HTTP response with a 5xx or 429 status (httpx's `HTTPStatusError`,
  requests' `HTTPError`: a tool's server failing);
- policy: the prompt past the model's context (`ContextWindowExceededError`, or a 400 that says so).
Anything else the agent raised is the agent's own error (`agent_error:<class>`): retried as before, not trained,
and not counted as either, until a rule says which it is.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass

from lightning_otel.agent_api.failures import (
    INFRASTRUCTURE,
    POLICY,
    InfrastructureError,
    PolicyError,
    checked_cause,
    registered_rules,
)

log = logging.getLogger("lightning_otel.runner")

AGENT_ERROR = "agent_error"
# Class names, matched anywhere in the exception's class hierarchy.
INFRASTRUCTURE_ERRORS = frozenset({
    "APIConnectionError", "APITimeoutError", "InternalServerError", "RateLimitError", "ServiceUnavailableError",
    "ConnectError", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout", "RemoteProtocolError",
    "ConnectionError", "TimeoutError", "ServerDisconnectedError", "ClientConnectorError",
})  # fmt: skip
CONTEXT_OVERFLOW_ERRORS = frozenset({"ContextWindowExceededError"})
# why the runner stopped an attempt -> its cause (the runtime page's table): a runner shutting down, or the queue's
# word (the attempt timed out or was cancelled there; the queue keeps its own cause, this one is the runner's report)
STOPPED_CAUSES = {"runner stopped": f"{INFRASTRUCTURE}:runner_stopped", "stopped": f"{INFRASTRUCTURE}:stopped_by_queue"}
_CONTEXT_WORDS = ("context length", "context window", "maximum context", "too many tokens", "prompt is too long")


def kind_of(cause: str | None) -> str | None:
    """ "infrastructure", "policy", "agent_error" or None (no cause)."""
    return None if cause is None else cause.partition(":")[0]


def cause_of_exception(exc: BaseException) -> str:
    """The cause of an attempt whose agent raised `exc` (the module docstring's order of rules)."""
    for rule in registered_rules():
        try:
            said = rule(exc)
            if said is not None:
                return checked_cause(said)
        except Exception as problem:  # a rule that fails is skipped, loudly: the next one decides
            log.warning("failure rule %s failed on %r: %s", getattr(rule, "__name__", rule), exc, problem)
    if isinstance(exc, (InfrastructureError, PolicyError)):
        return exc.cause
    names = {klass.__name__ for klass in type(exc).__mro__}
    if names & CONTEXT_OVERFLOW_ERRORS or (
        "BadRequestError" in names and any(word in str(exc).lower() for word in _CONTEXT_WORDS)
    ):
        return f"{POLICY}:context_overflow"
    if names & INFRASTRUCTURE_ERRORS:
        return f"{INFRASTRUCTURE}:{_first(names & INFRASTRUCTURE_ERRORS, type(exc))}"
    status = getattr(getattr(exc, "response", None), "status_code", None)  # httpx's, requests' HTTP errors
    if isinstance(status, int) and (status >= 500 or status == 429):
        return f"{INFRASTRUCTURE}:HTTP_{status}"
    return f"{AGENT_ERROR}:{type(exc).__name__}"


def cause_of_error_type(error_type: str) -> str | None:
    """The cause an errored LLM or tool span's `error.type` (a class name) says, when it is the infrastructure's."""
    return f"{INFRASTRUCTURE}:{error_type}" if error_type.rpartition(".")[2] in INFRASTRUCTURE_ERRORS else None


def _first(names: set[str], klass: type) -> str:
    """The most specific of `names` in `klass`'s hierarchy."""
    for base in klass.__mro__:
        if base.__name__ in names:
            return base.__name__
    return sorted(names)[0]


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """What a runner reports for an attempt: `status` for the queue ("succeeded" trains, "failed" is retried),
    `error`, `reward`, `cause`; `policy_failure`: a reward span of `reward` is still to be emitted (the agent gave
    none: it raised, or was stopped)."""

    status: str
    error: str | None = None
    reward: float | None = None
    cause: str | None = None
    policy_failure: bool = False


def outcome_of(
    *,
    reward: float | None,
    note: str | None,
    exc: BaseException | None,
    tripped: str | None,
    stopped: str | None,
    policy_failure_reward: float,
) -> AttemptOutcome:
    """The attempt's outcome as its agent ended (the module docstring's rules): a policy failure (the agent's
    exception said so, or a limit tripped: `tripped`) succeeds with `policy_failure_reward`; an infrastructure failure
    or the agent's own error fails (the queue retries it); `stopped`: the runner stopped it (why)."""
    if tripped is not None:
        return AttemptOutcome("succeeded", f"stopped by a limit: {tripped}", policy_failure_reward, tripped, True)
    if stopped is not None:  # the runner stopping, or the queue that ended it: never the policy's doing
        return AttemptOutcome("failed", stopped, None, STOPPED_CAUSES.get(stopped, f"{INFRASTRUCTURE}:stopped"))
    if exc is not None:
        cause = cause_of_exception(exc)
        said = "".join(traceback.format_exception_only(exc)).strip()
        if kind_of(cause) == POLICY:
            return AttemptOutcome("succeeded", said, policy_failure_reward, cause, True)
        return AttemptOutcome("failed", said, None, cause)
    return AttemptOutcome("succeeded", note, reward)


def with_swallowed_failures(outcome: AttemptOutcome, infrastructure: list[str]) -> AttemptOutcome:
    """An attempt that succeeded although calls of it failed for the infrastructure (`infrastructure`: their causes,
    from its spans, read once they were all ended) fails: the agent carried on without them, and its reward would
    train the policy on the outage. The queue retries it. This holds for a policy failure too (a limit that tripped
    after an outage): which of the two lowered its reward cannot be told, so it is not trained."""
    if outcome.status != "succeeded" or not infrastructure:
        return outcome
    failed = ", ".join(sorted(set(infrastructure)))
    return AttemptOutcome(
        "failed", f"a call failed ({failed}) and the agent carried on: retried, not trained", None, infrastructure[0]
    )


__all__ = [
    "AGENT_ERROR",
    "AttemptOutcome",
    "cause_of_error_type",
    "cause_of_exception",
    "kind_of",
    "outcome_of",
    "with_swallowed_failures",
]
