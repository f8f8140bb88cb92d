"""What the adapter did with a rollout's spans, in words a user can act on: a `CallDecision` per LLM span (selected
or not, and why) and the rollout's `RolloutDiagnostics` (agents seen, calls matched and unmatched, calls without
token ids, duplicates, merge breaks, rewards that found no call). `Trainer.dev`, the dev report, the rollout view and
the trainer's "why nothing was selected" read them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class CallDecision:
    """What the adapter did with one LLM span, and why (`reason`, in words, rendered when asked for: the adapter's
    hot path only records the facts)."""

    span_id: str
    agent: str | None
    selected: bool  # its response tokens are trained (in `sample`)
    why: tuple[Any, ...]  # (outcome, facts...): see `reason`
    sample: int | None = None  # index in AdaptedRollout.triplets
    note: str | None = None  # said after the reason: why the call's agent is unknown (a harness join that failed)

    @property
    def reason(self) -> str:
        return f"{self._reason()} ({self.note})" if self.note else self._reason()

    def _reason(self) -> str:
        outcome, *facts = self.why
        if outcome == "harness":
            (call,) = facts
            return (f"the harness's own record of the gateway's call {call}, which holds the token ids; it names that "
                    f"call's agent {self.agent!r}")  # fmt: skip
        if outcome == "duplicate":
            kept, response_id = facts
            return (f"duplicate: another span ({kept}) recorded the same response ({response_id}) with token ids "
                    "at least as complete; that one is used")  # fmt: skip
        if outcome == "undelivered":
            caller, received = facts
            return (f"not trained: the agent never received this answer; its call ({caller}) was answered by "
                    f"{received} after a retry (a connection cut or a timeout lost this one)")  # fmt: skip
        if outcome == "unmatched":
            pattern, rollout_agents = facts
            return (f"not selected: agent_match {pattern!r} finds neither the call's agent {self.agent!r} nor the "
                    f"rollout's agents {list(rollout_agents)}")  # fmt: skip
        if outcome == "ambiguous_policy":
            return f"not trained: {facts[0]}"
        if outcome == "other_policy":
            policy, served_by = facts
            return (f"not trained: agent_match gives it to policy {policy!r}, but policy {served_by!r} sampled it (the "
                    "gateway did not know the call's agent: send the x-agl-agent-name header)")  # fmt: skip
        pattern, matched_by, name = facts[:3]
        if matched_by is None:
            why = "agent_match is None: every call is selected"
        else:
            why = f"agent_match {pattern!r} finds the {matched_by}'s agent {name!r}"
        if outcome == "no_ids":
            return (f"no sample: {why}, but the span has no token ids (the endpoint returned none, or was not "
                    "registered as trainable)")  # fmt: skip
        if len(facts) > 3:  # a policy per agent
            why += f"; policy {facts[3]!r}"
        if outcome == "incomplete":
            return f"trained: {why}; its token ids are marked incomplete (agl.llm.token_ids_complete=false)"
        return f"trained: {why}"

    def to_json(self) -> dict[str, Any]:
        return {"span_id": self.span_id, "agent": self.agent, "selected": self.selected, "reason": self.reason,
                "sample": self.sample}  # fmt: skip


@dataclass(slots=True)
class RolloutDiagnostics:
    rollout_id: str | None
    agents_seen: list[str] = field(default_factory=list)
    rollout_agents: list[str] = field(default_factory=list)  # the LitAgent's names (from the runner's span)
    llm_calls: int = 0
    matched_calls: int = 0
    unmatched_calls: int = 0
    calls_without_token_ids: int = 0
    incomplete_token_ids: int = 0
    duplicate_calls: int = 0
    undelivered_calls: int = 0  # answers the policy gave that the agent's client never received (it retried)
    harness_copies: int = 0  # a harness's own spans of calls the gateway recorded (adapters.harness_calls)
    merge_breaks: int = 0
    rewards_without_call: int = 0
    other_policy_calls: int = 0  # a policy per agent: calls another policy sampled (not trained)
    policy_conflicts: list[str] = field(default_factory=list)  # agents whose calls match two policies' patterns
    calls: list[CallDecision] = field(default_factory=list)  # every LLM span, in start order (duplicates last)

    def why_no_sample(self, agent_match: str | None) -> str | None:
        """Why this rollout gave no training sample, in words a user can act on (None when it gave one)."""
        if any(call.selected for call in self.calls):
            return None
        if self.llm_calls == 0:
            return (
                "no LLM call was recorded: is the agent's client instrumented (import lightning_otel.auto, or a "
                "supported framework), and does it call the LLM resource it was given?"
            )
        if self.matched_calls == 0:
            return (
                f"agent_match={agent_match!r} selected none of its {self.llm_calls} LLM calls: it must find "
                f"(re.search) an agent seen around a call {self.agents_seen} or the rollout's agent "
                f"{self.rollout_agents}"
            )
        return (
            f"none of the {self.matched_calls} selected LLM calls has token ids: the endpoint must return them "
            "(vLLM >= 0.10.2 `return_token_ids`, the policy gateway, or the test server) and be registered as trainable"
        )
