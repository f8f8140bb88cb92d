"""Spans of a rollout in, training samples out: `TraceToTriplet(agent_match=...)`.

The input is what the collector hands the trainer (`Client.rollout_spans(...)`: flat span dicts with native
attribute values). LLM calls are recognised by `gen_ai.operation.name` (never by span-name regexes); each selected
call becomes a `Triplet` (prompt ids, response ids, logprobs, reward) with the exact token ids the inference server
returned.

`agent_match`, the one rule: a call is selected when `re.search(agent_match, name)` finds
- its agent: `gen_ai.agent.name`, the nearest agent around the call (a LangGraph node, an ADK/CrewAI/AutoGen agent,
  a `lightning_otel.agent(...)` block), so `"write"` selects `write_query` and `rewrite_query` but not
  `check_query`; or
- the rollout's agent: the LitAgent (its `name` or class name) or `@rollout` function the runner ran, so
  `"LitAdkAgent"` selects every call of that agent's rollouts, whatever the framework names its agents inside.
`agent_match=None` selects every call. A mapping from patterns to policy names (`{"plan": "planner", "call":
"caller"}`) selects what any pattern selects and names each sample's policy (`Triplet.policy`; a policy per agent:
`adapters.policy_match`); a call that another policy served (its span's `agl.llm.policy`) is not trained.

- Calls are ordered by start time and deduplicated by `gen_ai.response.id` (a call recorded both by the client
  instrumentor and by a gateway is kept once, the copy with complete token ids first).
- Rewards (`agl.reward` spans): one with `agl.reward.response_id` goes to that call; otherwise to the latest call
  that started before it and has no reward of that name yet. `final_reward` is the rollout's last primary reward.
- `mode="trajectory"` merges consecutive calls of one agent when the next prompt extends the previous prompt plus
  response exactly; the tokens the agent inserted in between (tool results, the next user turn) are kept in the
  response but masked out (`response_mask` 0, logprob 0.0). Otherwise a new segment starts (a "merge break").
- Step rewards, per-call returns and anchor states: `lightning_otel.adapters.credit` (the rule); `process_rewards`
  adds penalties read from the trace (a failed tool, a cut reply: `lightning_otel.adapters.process_rewards`).
- `RolloutDiagnostics` says what happened: agents seen, matched/unmatched calls, calls without token ids,
  duplicates, merge breaks, rewards that found no call; and per call (`calls`, a `CallDecision` each) whether it
  became a sample and why, in words (the collector's rollout view shows these).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lightning_otel import semconv
from lightning_otel.adapters.credit import CallStep, call_credits
from lightning_otel.adapters.diagnostics import CallDecision, RolloutDiagnostics
from lightning_otel.adapters.llm_calls import Call, llm_calls, rollout_agent_names
from lightning_otel.adapters.policy_match import AmbiguousPolicy, PolicyMatch, policy_match
from lightning_otel.adapters.process_rewards import TRACE_SOURCE, ProcessRewards, trace_rewards
from lightning_otel.flat_span import Span


@dataclass(slots=True)
class Triplet:
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    response_logprobs: list[float] | None
    response_mask: list[int]  # 1: sampled by the policy (trained), 0: inserted by the agent (masked)
    reward: float | None
    rewards: dict[str, float]
    agent_name: str | None
    rollout_id: str | None
    attempt_id: str | None
    response_ids: list[str]  # the gen_ai.response.id of every call in this sample
    span_ids: list[str]
    task_id: str | None = None
    # Credit (lightning_otel.adapters.credit): where the new input since the agent's previous call begins in the
    # prompt, the agent's calls after this one, and the step rewards credited to it (calls between, value).
    prompt_delta_start: int = 0
    calls_after: int = 0
    rewards_ahead: list[tuple[int, float]] = field(default_factory=list)
    reward_sources: dict[str, str] = field(default_factory=dict)  # reward name -> what gave it ("trace", ...)
    # The oldest policy version that sampled any of its calls (`agl.llm.policy_version`; None: not recorded):
    # asynchronous training bounds how far behind the trained policy it may be.
    policy_version: int | None = None
    # The policy the sample trains (agent_match as a mapping: a policy per agent); None: the run's one policy.
    policy: str | None = None

    @property
    def new_input(self) -> list[int]:
        """The prompt tokens this call saw that its agent's previous call had not (its anchor state)."""
        return self.prompt_token_ids[self.prompt_delta_start :]


@dataclass(slots=True)
class AdaptedRollout:
    triplets: list[Triplet]
    final_reward: float | None
    diagnostics: RolloutDiagnostics
    step_rewards_total: float = 0.0  # every step reward of the rollout (intermediate and process rewards)


# Agent Lightning's adapter options: accepted, and why each has nothing to do here.
AGENT_LIGHTNING_OPTIONS = {
    "repair_hierarchy": "spans carry their real parents (OpenTelemetry context), there is no tree to repair",
    "llm_call_match": "LLM calls are recognised by gen_ai.operation.name, not by span-name regexes",
    "exclude_llm_call_in_reward": "reward spans (agl.reward) are never LLM calls here",
    "reward_match": "rewards go to the call named by response_id, else the latest unrewarded call before them",
}


def _drop_agent_lightning_options(options: dict[str, Any], owner: str, stacklevel: int) -> dict[str, Any]:
    for key in [key for key in options if key in AGENT_LIGHTNING_OPTIONS]:
        warnings.warn(f"{owner} option {key!r} has no effect: {AGENT_LIGHTNING_OPTIONS[key]}",
                      DeprecationWarning, stacklevel=stacklevel + 1)  # fmt: skip
        del options[key]
    return options


class TraceToTriplet:
    """`TraceToTriplet(agent_match="write|rewrite", mode="transition", reward="primary")`.

    `agent_match`: see the module docstring (the call's agent or the rollout's agent; None: every call).
    `reward` names the reward that becomes `Triplet.reward` and `final_reward` (every reward name is kept in
    `Triplet.rewards`). `process_rewards`: penalties read from the trace, e.g. `{"tool_error": -0.5}`
    (`lightning_otel.adapters.process_rewards`; off by default).
    """

    def __init__(
        self,
        agent_match: str | Mapping[str, str] | None = None,
        mode: Literal["transition", "trajectory"] = "transition",
        reward: str = semconv.DEFAULT_REWARD_NAME,
        process_rewards: ProcessRewards | Mapping[str, float] | None = None,
    ) -> None:
        if mode not in ("transition", "trajectory"):
            raise ValueError(f"mode must be 'transition' or 'trajectory', got {mode!r}")
        if agent_match is not None and not isinstance(agent_match, (str, Mapping)):
            raise TypeError(f"agent_match takes a pattern, a mapping of patterns to policy names or None, got "
                            f"{agent_match!r}")  # fmt: skip
        # a mapping: a policy per agent; it selects what any of its patterns selects
        self.policies: PolicyMatch | None = policy_match(agent_match)
        pattern = self.policies.selector if self.policies is not None else agent_match
        try:
            self._pattern = re.compile(pattern) if pattern is not None else None
        except re.error as exc:
            raise ValueError(f"agent_match {agent_match!r} is not a valid regular expression: {exc}") from None
        self.agent_match = dict(agent_match) if isinstance(agent_match, Mapping) else agent_match
        self.mode = mode
        self.reward = reward
        self.process_rewards = ProcessRewards.from_config(process_rewards)

    @classmethod
    def from_config(cls, config: TraceToTriplet | Mapping[str, Any] | None) -> TraceToTriplet:
        """Accept an adapter, `None` (all agents) or the dict form `{"agent_match": "write", "mode": ...}`."""
        if isinstance(config, TraceToTriplet):
            return config
        if config is None:
            return cls()
        options = _drop_agent_lightning_options(dict(config), "adapter", stacklevel=3)  # user -> Trainer -> here
        unknown = set(options) - {"agent_match", "mode", "reward", "process_rewards"}
        if unknown:
            raise ValueError(
                f"unknown adapter option(s) {sorted(unknown)}: use agent_match, mode, reward, process_rewards"
            )
        return cls(**options)

    def config(self) -> dict[str, Any]:
        """The adapter as its dict form, whole: `TraceToTriplet.from_config(adapter.config())` adapts alike (each
        rollout records it, so the rollout view explains the rollout with the trainer's own adapter)."""
        process = self.process_rewards.as_config() if self.process_rewards is not None else None
        return {"agent_match": self.agent_match, "mode": self.mode, "reward": self.reward, "process_rewards": process}

    def matches(self, agent_name: str | None, rollout_agents: Sequence[str] = ()) -> bool:
        """Whether `agent_match` selects a call of `agent_name` in a rollout of `rollout_agents`."""
        return self._matched_by(agent_name, rollout_agents) is not None

    def _matched_by(self, agent_name: str | None, rollout_agents: Sequence[str]) -> tuple[str | None, str] | None:
        """(whose agent name `agent_match` found: "call" or "rollout", that name); (None, "") for agent_match=None;
        None when it selects nothing."""
        if self._pattern is None:
            return None, ""
        if agent_name is not None and self._pattern.search(agent_name):
            return "call", agent_name
        found = next((name for name in rollout_agents if self._pattern.search(name)), None)
        return None if found is None else ("rollout", found)

    def adapt(self, spans: Iterable[Span], *, task_id: str | None = None) -> AdaptedRollout:
        """One rollout's spans (any order) -> its training samples, final reward and diagnostics."""
        spans = list(spans)
        rollout_id = next(
            (
                s["attributes"].get(semconv.AGL_ROLLOUT_ID)
                for s in spans
                if (s.get("attributes") or {}).get(semconv.AGL_ROLLOUT_ID)
            ),
            None,
        )
        diagnostics = RolloutDiagnostics(rollout_id, rollout_agents=rollout_agent_names(spans))
        calls = llm_calls(spans, diagnostics)
        final_reward = self._assign_rewards(calls, spans, diagnostics)
        if self.process_rewards is not None:
            by_span = {str(call.span.get("spanId")): call for call in calls}
            for span_id, name, value in trace_rewards(self.process_rewards, spans, [c.span for c in calls]):
                call = by_span[span_id]
                call.rewards[name] = call.rewards.get(name, 0.0) + value
                call.sources[name] = TRACE_SOURCE
                call.step_rewards.append(value)
        credits = call_credits([CallStep(c.agent, c.prompt, c.response, c.step_rewards) for c in calls])
        credit_of = {id(call): credit for call, credit in zip(calls, credits, strict=True)}
        attempt_id = next(
            (
                s["attributes"].get(semconv.AGL_ATTEMPT_ID)
                for s in spans
                if (s.get("attributes") or {}).get(semconv.AGL_ATTEMPT_ID)
            ),
            None,
        )
        selected = []
        decisions: dict[str, CallDecision] = {}
        for call in calls:
            span_id = str(call.span.get("spanId"))
            matched = self._matched_by(call.agent, diagnostics.rollout_agents)
            if matched is None:
                diagnostics.unmatched_calls += 1
                why = ("unmatched", self.agent_match, diagnostics.rollout_agents)
                decisions[span_id] = CallDecision(span_id, call.agent, False, why)
                continue
            if self.policies is not None and (refused := self._policy_refusal(call, matched, diagnostics)):
                decisions[span_id] = CallDecision(span_id, call.agent, False, refused)
                continue
            diagnostics.matched_calls += 1
            if call.prompt is None or call.response is None:
                diagnostics.calls_without_token_ids += 1
                decisions[span_id] = CallDecision(span_id, call.agent, False, ("no_ids", self.agent_match, *matched))
                continue
            outcome = "trained"
            if not call.complete:
                diagnostics.incomplete_token_ids += 1
                outcome = "incomplete"
            facts = (outcome, self.agent_match, *matched, *((call.policy,) if call.policy else ()))
            decisions[span_id] = CallDecision(span_id, call.agent, True, facts)
            selected.append(call)
        if self.mode == "trajectory":
            triplets = self._trajectories(selected, diagnostics)
        else:
            triplets = [
                self._triplet([call], call.response or [], [1] * len(call.response or []), call.logprobs)
                for call in selected
            ]
        first_call = {str(call.span.get("spanId")): call for call in selected}
        for index, triplet in enumerate(triplets):
            triplet.rollout_id, triplet.attempt_id, triplet.task_id = rollout_id, attempt_id, task_id
            for span_id in triplet.span_ids:
                decisions[span_id].sample = index
            credit = credit_of[id(first_call[triplet.span_ids[0]])]  # a merged segment: its first call's
            triplet.prompt_delta_start, triplet.calls_after = credit.delta_start, credit.calls_after
            triplet.rewards_ahead = credit.rewards_ahead
        for call in calls:
            if call.note:
                decisions[str(call.span.get("spanId"))].note = call.note
        diagnostics.calls[:0] = decisions.values()  # start order, before the duplicates llm_calls recorded
        step_total = sum(sum(call.step_rewards) for call in calls)
        return AdaptedRollout(triplets, final_reward, diagnostics, step_total)

    def _policy_refusal(
        self, call: Call, matched: tuple[str | None, str], diagnostics: RolloutDiagnostics
    ) -> tuple[Any, ...] | None:
        """A policy per agent: set the call's policy, or say why it trains none (its agent matches two policies'
        patterns; another policy sampled it)."""
        assert self.policies is not None
        try:
            call.policy = self.policies.policy_of(matched[1])
        except AmbiguousPolicy as exc:
            diagnostics.policy_conflicts.append(str(exc))
            return ("ambiguous_policy", str(exc))
        if call.served_by is not None and call.served_by != call.policy:
            diagnostics.other_policy_calls += 1
            return ("other_policy", call.policy, call.served_by)
        return None

    # --- steps -------------------------------------------------------------------------------------------------
    def _assign_rewards(
        self, calls: list[Call], spans: Sequence[Span], diagnostics: RolloutDiagnostics
    ) -> float | None:
        rewards = sorted(
            (s for s in spans if s.get("name") == semconv.REWARD_SPAN_NAME),
            key=lambda s: int(s.get("startTimeUnixNano") or 0),
        )
        by_response_id = {c.response_id: c for c in calls if c.response_id}
        final: float | None = None
        valued = [
            s for s in rewards if isinstance((s.get("attributes") or {}).get(semconv.AGL_REWARD_VALUE), (int, float))
        ]
        primary = [s for s in valued if _reward_name(s) == self.reward]
        final_span = primary[-1] if primary else None  # the rollout's final reward; earlier ones are step rewards
        for span in valued:
            attributes = span.get("attributes") or {}
            value = attributes[semconv.AGL_REWARD_VALUE]
            name = _reward_name(span)
            if span is final_span:
                final = float(value)
            target = by_response_id.get(attributes.get(semconv.AGL_REWARD_RESPONSE_ID))
            if target is None:
                at = int(span.get("startTimeUnixNano") or 0)
                target = next((c for c in reversed(calls) if c.start_ns <= at and name not in c.rewards), None)
            if target is None:
                diagnostics.rewards_without_call += 1
                continue
            target.rewards[name] = float(value)
            if attributes.get(semconv.AGL_REWARD_SOURCE):
                target.sources[name] = str(attributes[semconv.AGL_REWARD_SOURCE])
            if name == self.reward and span is not final_span:
                target.step_rewards.append(float(value))
        return final

    def _triplet(
        self, calls: list[Call], response: list[int], mask: list[int], logprobs: list[float] | None
    ) -> Triplet:
        rewards: dict[str, float] = {}
        for call in calls:  # a merged segment carries the latest value of each reward name
            rewards.update(call.rewards)
        first = calls[0]
        return Triplet(
            prompt_token_ids=list(first.prompt or []),
            response_token_ids=response,
            response_logprobs=logprobs,
            response_mask=mask,
            reward=rewards.get(self.reward),
            rewards=rewards,
            agent_name=first.agent,
            rollout_id=None,
            attempt_id=None,
            response_ids=[c.response_id for c in calls if c.response_id],
            span_ids=[str(c.span.get("spanId")) for c in calls],
            reward_sources={name: source for call in calls for name, source in call.sources.items()},
            policy_version=min(versions)
            if (versions := [c.policy_version for c in calls if c.policy_version is not None])
            else None,
            policy=first.policy,
        )

    def _trajectories(self, calls: list[Call], diagnostics: RolloutDiagnostics) -> list[Triplet]:
        segments: list[_Segment] = []
        open_segment: dict[str | None, _Segment] = {}  # agent -> its segment still being extended
        for call in calls:
            response = call.response or []
            segment = open_segment.get(call.agent)
            if segment is not None:
                context = (segment.calls[0].prompt or []) + segment.response
                prompt = call.prompt or []
                if prompt[: len(context)] == context:
                    inserted = prompt[len(context) :]
                    segment.response += inserted + response
                    segment.mask += [0] * len(inserted) + [1] * len(response)
                    if segment.logprobs is not None and call.logprobs is not None:
                        segment.logprobs += [0.0] * len(inserted) + call.logprobs
                    else:
                        segment.logprobs = None  # one call without logprobs: none for the merged sample
                    segment.calls.append(call)
                    continue
                diagnostics.merge_breaks += 1
            segment = _Segment(
                [call], list(response), [1] * len(response), list(call.logprobs) if call.logprobs is not None else None
            )
            open_segment[call.agent] = segment
            segments.append(segment)
        return [self._triplet(s.calls, s.response, s.mask, s.logprobs) for s in segments]


class TracerTraceToTriplet(TraceToTriplet):
    """Agent Lightning's adapter name and options, mapped to `TraceToTriplet` (deprecated: use TraceToTriplet)."""

    def __init__(
        self,
        agent_match: str | None = None,
        mode: Literal["transition", "trajectory"] = "transition",
        reward: str = semconv.DEFAULT_REWARD_NAME,
        **agent_lightning_options: Any,
    ) -> None:
        warnings.warn("TracerTraceToTriplet is Agent Lightning's name: use TraceToTriplet", DeprecationWarning,
                      stacklevel=2)  # fmt: skip
        unknown = set(_drop_agent_lightning_options(agent_lightning_options, "TracerTraceToTriplet", stacklevel=2))
        if unknown:
            raise TypeError(f"TracerTraceToTriplet got unknown option(s) {sorted(unknown)}")
        super().__init__(agent_match=agent_match, mode=mode, reward=reward)


@dataclass(slots=True)
class _Segment:
    """Calls of one agent merged into one sample (trajectory mode)."""

    calls: list[Call]
    response: list[int]
    mask: list[int]
    logprobs: list[float] | None


def _reward_name(span: Span) -> str:
    return str((span.get("attributes") or {}).get(semconv.AGL_REWARD_NAME) or semconv.DEFAULT_REWARD_NAME)
