"""`agent_match` as a mapping: which agent's calls train which policy (a policy per agent).

    adapter={"agent_match": {"plan": "planner", "call|tool": "caller"}}

Each key is a regular expression searched (`re.search`) in a call's agent name, each value the name of the policy
(a LoRA adapter, or a model) that serves and learns from the calls it matches. A call matched by none is not
trained (it is served by the base model); a call matched by two patterns that name different policies is an error,
said in one line, because no one can tell which policy should have sampled it. The string form (`"write"`) is the
single-policy rule and keeps meaning exactly what it meant.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning_otel.semconv import BASE_POLICY


class AmbiguousPolicy(ValueError):
    """A call's agent name matched patterns of two policies."""


@dataclass(frozen=True, slots=True)
class PolicyMatch:
    """The mapping, checked and compiled: `policy_of(agent)` names the policy an agent's calls go to."""

    patterns: tuple[tuple[str, re.Pattern[str], str], ...]  # (pattern as written, compiled, policy)

    @classmethod
    def parse(cls, agent_match: Mapping[str, Any]) -> PolicyMatch:
        """The mapping as given to `agent_match`; a bad pattern or policy name is a ValueError naming it."""
        if not agent_match:
            raise ValueError("agent_match mapping is empty: map at least one agent pattern to a policy name")
        patterns = []
        for pattern, policy in agent_match.items():
            if not isinstance(pattern, str) or not pattern:
                raise ValueError(f"agent_match keys are regular expressions (non-empty strings), got {pattern!r}")
            if not isinstance(policy, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", policy):
                raise ValueError(
                    f"agent_match[{pattern!r}] = {policy!r}: a policy name is letters, digits, '_', '.', '-' (it names "
                    "the served model and its checkpoint folder)"
                )
            if policy == BASE_POLICY:
                raise ValueError(f"agent_match[{pattern!r}] = 'base': 'base' names the base model, which serves the "
                                 "calls no policy claims; name the policy otherwise")  # fmt: skip
            try:
                patterns.append((pattern, re.compile(pattern), policy))
            except re.error as exc:
                raise ValueError(f"agent_match pattern {pattern!r} is not a valid regular expression: {exc}") from None
        return cls(tuple(patterns))

    @property
    def policies(self) -> list[str]:
        """The policies named, in the order first named."""
        return list(dict.fromkeys(policy for _, _, policy in self.patterns))

    @property
    def selector(self) -> str:
        """One regular expression that matches what any pattern matches (the calls that are trained)."""
        return "|".join(f"(?:{pattern})" for pattern, _, _ in self.patterns)

    def policy_of(self, agent_name: str | None) -> str | None:
        """The policy of an agent's calls (None: no pattern matches); AmbiguousPolicy when two policies' patterns
        match it."""
        if not agent_name:
            return None
        found = [(pattern, policy) for pattern, compiled, policy in self.patterns if compiled.search(agent_name)]
        if len({policy for _, policy in found}) > 1:
            named = ", ".join(f"{pattern!r} -> {policy}" for pattern, policy in found)
            raise AmbiguousPolicy(
                f"agent {agent_name!r} matches the patterns of two policies ({named}): make the agent_match patterns "
                "exclusive (e.g. anchor them: '^write$')"
            )
        return found[0][1] if found else None


def policy_match(agent_match: Any) -> PolicyMatch | None:
    """The mapping form of `agent_match` parsed; None for the single-policy forms (a pattern, or None)."""
    if isinstance(agent_match, Mapping):
        return PolicyMatch.parse(agent_match)
    return None


__all__ = ["AmbiguousPolicy", "PolicyMatch", "policy_match"]
