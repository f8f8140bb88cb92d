"""Why a rollout failed, in the agent author's words: the policy's doing or the infrastructure's.

The runner decides it for every attempt (`lightning_otel.runner.failure_causes`): an infrastructure failure (the
policy's server or a tool unreachable or answering 5xx, a timeout of an external call, a runner that died) is
retried on a fresh attempt and never trained as a low reward; a policy failure (a context overflow, an answer the
agent cannot use, a rollout stopped by a no-progress rule) trains with the policy-failure reward. An agent says so
itself by raising one of these, or teaches the runner with a rule:

    @agl.failure_rule
    def sandbox_errors(exc: BaseException) -> str | None:
        if isinstance(exc, SandboxCrashed):
            return "infrastructure:sandbox_crashed"
        if isinstance(exc, sqlite3.OperationalError):   # the model's SQL did not run
            return "policy:sql_error"
        return None                                    # not this rule's: the next one decides

A cause is `"infrastructure:<what>"` or `"policy:<what>"`.
"""

from __future__ import annotations

from collections.abc import Callable

INFRASTRUCTURE, POLICY = "infrastructure", "policy"
FailureRule = Callable[[BaseException], "str | None"]
_RULES: list[FailureRule] = []


class InfrastructureError(RuntimeError):
    """Raise it from an agent when something the policy did not cause failed (a tool's server, a sandbox): the
    attempt is retried and never trained. `what` names it in the cause (`infrastructure:<what>`)."""

    def __init__(self, message: str, what: str = "agent_said") -> None:
        super().__init__(message)
        self.cause = f"{INFRASTRUCTURE}:{what}"


class PolicyError(RuntimeError):
    """Raise it from an agent when the model's output is at fault (an answer that does not parse, a malformed tool
    call): the rollout ends and trains with the policy-failure reward. `what` names it (`policy:<what>`)."""

    def __init__(self, message: str, what: str = "agent_said") -> None:
        super().__init__(message)
        self.cause = f"{POLICY}:{what}"


def failure_rule(rule: FailureRule) -> FailureRule:
    """Register a rule (exception -> cause or None); rules registered later are asked first, the built-in ones
    last. Register it where the runners import it: in the agent's module."""
    if not callable(rule):
        raise TypeError(f"failure_rule takes a function (exception -> cause or None), got {rule!r}")
    _RULES.insert(0, rule)
    return rule


def registered_rules() -> tuple[FailureRule, ...]:
    return tuple(_RULES)


def checked_cause(cause: str) -> str:
    """A cause as a rule returned it, refused unless it is `infrastructure:<what>` or `policy:<what>`."""
    kind, found, what = cause.partition(":")
    if not found or kind not in (INFRASTRUCTURE, POLICY) or not what:
        raise ValueError(f"a failure cause is 'infrastructure:<what>' or 'policy:<what>', got {cause!r}")
    return cause


__all__ = [
    "INFRASTRUCTURE",
    "POLICY",
    "FailureRule",
    "InfrastructureError",
    "PolicyError",
    "checked_cause",
    "failure_rule",
    "registered_rules",
]
