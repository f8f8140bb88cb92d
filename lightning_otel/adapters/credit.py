"""What each LLM call of a rollout is credited with, read from the trace: the rule behind per-call returns and anchor
states (the estimators in `lightning_otel.training.loop.credit` turn these into advantages).

**Step rewards.** The rollout's final reward is its last `primary` reward (as before). Every other `primary` reward
emitted during the rollout, and every process reward read from the trace (`source="trace"`: a failed tool, a cut
reply), is a step reward of the call it is attached to (the call named by `agl.reward.response_id`, else the latest
call that started before it). Other named rewards are metrics, not step rewards.

**Returns.** Each agent's calls, in start order, are its steps. A step reward attached to a call is credited to
that call and to every call started before it (of any agent), discounted once per call of the credited call's own
agent in between; the final reward comes after the agent's last call:

    G(call i of agent a) = sum over step rewards r at or after i:  gamma ** (a's calls after i up to r) * r
                           + gamma ** (a's calls after i) * final

With gamma = 1 (the default) a call's return is the final reward plus every step reward from it on.

**Anchor states.** The new input a call saw since its agent's previous call: the prompt tokens after that call's
prompt + response when the prompt extends them exactly (a chat history grows by the tool result or the next user
turn), else the whole prompt; the whole prompt for the agent's first call. Calls of one task's rollouts that saw the
same new input, from the same agent, are in the same anchor state.

**Advantages** (`assign_credit`, what `AnchorAdvantage` trains with and the rollout view shows):
`A = A_rollout + step_weight * A_step`; `A_rollout` is GRPO's over the task's rollouts (each counted once) on the
episode return (final reward plus the rollout's step rewards; the final reward alone for `mode="grpo"`);
`A_step` is the call's return minus the mean return of the other members of its anchor group (leave-one-out),
divided by the group's return std with `step_normalize_by_std`; 0 in a group of one.
"""

from __future__ import annotations

import bisect
import hashlib
import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol


@dataclass(slots=True)
class CallStep:
    """One LLM call as the credit rule sees it (every call of the rollout, selected or not, in start order)."""

    agent: str | None
    prompt: list[int] | None
    response: list[int] | None
    step_rewards: list[float]  # values of the step rewards attached to this call


@dataclass(slots=True)
class CallCredit:
    delta_start: int  # where the new input since the agent's previous call begins in the prompt
    calls_after: int  # the agent's calls after this one (the final reward's discount exponent)
    rewards_ahead: list[tuple[int, float]]  # (the agent's calls between, value) of each step reward credited here


def call_credits(steps: Sequence[CallStep]) -> list[CallCredit]:
    """The credit of every call (same order as `steps`), by the rules in the module docstring."""
    by_agent: dict[str | None, list[int]] = {}
    position: list[int] = []  # each call's index among its agent's calls
    for index, step in enumerate(steps):
        own = by_agent.setdefault(step.agent, [])
        position.append(len(own))
        own.append(index)
    credits = [
        CallCredit(_delta_start(steps, by_agent[step.agent], position[index]),
                   len(by_agent[step.agent]) - 1 - position[index], [])
        for index, step in enumerate(steps)
    ]  # fmt: skip
    for rewarded, step in enumerate(steps):
        for value in step.step_rewards:
            for index in range(rewarded + 1):  # the rewarded call and every call started before it
                # the agent's calls after this one, up to and including the rewarded call
                between = bisect.bisect_right(by_agent[steps[index].agent], rewarded) - 1 - position[index]
                credits[index].rewards_ahead.append((between, value))
    return credits


def _delta_start(steps: Sequence[CallStep], own: list[int], position: int) -> int:
    if position == 0:
        return 0
    previous, current = steps[own[position - 1]], steps[own[position]]
    if previous.prompt is None or previous.response is None or current.prompt is None:
        return 0
    context = previous.prompt + previous.response
    return len(context) if current.prompt[: len(context)] == context else 0


def discounted_return(
    final: float, calls_after: int, rewards_ahead: Sequence[tuple[int, float]], gamma: float
) -> float:
    """A call's return G (module docstring) from its final reward and the step rewards credited to it."""
    return sum(gamma**between * value for between, value in rewards_ahead) + gamma**calls_after * final


def group_advantages(
    rewards: Mapping[Hashable, float],
    group_of: Mapping[Hashable, Hashable],
    *,
    normalize_by_std: bool = True,
    lone: Literal["reward", "zero"] = "reward",
    epsilon: float = 1e-6,
) -> dict[Hashable, float]:
    """Advantage of every entry (a rollout, or a row) within its group: (reward - mean) / (std + epsilon), std the
    sample standard deviation (n - 1, as verl's GRPO), or reward - mean without `normalize_by_std`. A group of one
    has no baseline: `lone="reward"` keeps its raw reward (verl's GRPO), `"zero"` gives it 0 (tinker-cookbook)."""
    members: dict[Hashable, list[float]] = {}
    for key, reward in rewards.items():
        members.setdefault(group_of[key], []).append(reward)
    stats: dict[Hashable, tuple[float, float]] = {}
    for group, values in members.items():
        if len(values) == 1:
            stats[group] = (0.0, 1.0) if lone == "reward" else (values[0], 1.0)
        else:
            stats[group] = (statistics.fmean(values), statistics.stdev(values))
    advantages = {}
    for key, reward in rewards.items():
        mean, std = stats[group_of[key]]
        advantages[key] = (reward - mean) / (std + epsilon) if normalize_by_std else reward - mean
    return advantages


class Credited(Protocol):
    """What the credit of a sample needs from its triplet (`Triplet` has these)."""

    agent_name: str | None
    calls_after: int
    rewards_ahead: list[tuple[int, float]]

    @property
    def new_input(self) -> list[int]: ...


AnchorKey = Callable[[str | None, list[int]], Hashable]


@dataclass(frozen=True, slots=True)
class CreditInput:
    group: str  # GRPO's group (a task in a step, per agent with group_by_agent)
    rollout: str
    reward: float  # the rollout's final reward
    step_rewards_total: float  # the rollout's step rewards
    triplet: Credited | None


@dataclass(frozen=True, slots=True)
class CreditSettings:
    mode: Literal["grpo", "anchor"] = "anchor"
    step_weight: float = 1.0
    gamma: float = 1.0
    normalize_by_std: bool = True
    step_normalize_by_std: bool = True
    lone: Literal["reward", "zero"] = "reward"
    negative_weight: float = 1.0
    epsilon: float = 1e-6


@dataclass(slots=True)
class Credit:
    """What one call was credited with."""

    call_return: float
    rollout_advantage: float
    step_advantage: float
    advantage: float  # what it is trained with
    anchor: str  # a short digest naming the anchor group (shared by its members)
    anchor_size: int  # members of the group (1: no other call saw that state)

    def to_json(self) -> dict[str, Any]:
        return {
            "return": self.call_return,
            "rollout_advantage": self.rollout_advantage,
            "step_advantage": self.step_advantage,
            "advantage": self.advantage,
            "anchor": self.anchor,
            "anchor_size": self.anchor_size,
        }


def _anchor(item: CreditInput, anchor_key: AnchorKey | None) -> Hashable:
    triplet = item.triplet
    if triplet is None:
        return (item.group, None, item.rollout)  # no tokens: a state of its own
    state = anchor_key(triplet.agent_name, triplet.new_input) if anchor_key else tuple(triplet.new_input)
    return (item.group, triplet.agent_name, state)


def assign_credit(
    items: Sequence[CreditInput], settings: CreditSettings, anchor_key: AnchorKey | None = None
) -> list[Credit]:
    """Every item's credit (same order), by the module docstring's rules."""
    keys = [(item.group, item.rollout) for item in items]
    with_steps = settings.mode == "anchor"
    episode = {
        key: item.reward + (item.step_rewards_total if with_steps else 0.0)
        for key, item in zip(keys, items, strict=True)
    }
    rollout_advantage = group_advantages(
        episode, {key: key[0] for key in episode}, normalize_by_std=settings.normalize_by_std, lone=settings.lone,
        epsilon=settings.epsilon,
    )  # fmt: skip
    returns = [
        discounted_return(item.reward, item.triplet.calls_after, item.triplet.rewards_ahead, settings.gamma)
        if item.triplet is not None
        else item.reward
        for item in items
    ]
    members: dict[Hashable, list[int]] = {}
    for index, item in enumerate(items):
        members.setdefault(_anchor(item, anchor_key), []).append(index)
    step = [0.0] * len(items)
    anchor_of: list[tuple[str, int]] = [("", 1)] * len(items)
    for anchor, indices in members.items():
        name = hashlib.blake2s(repr(anchor).encode(), digest_size=4).hexdigest()
        for index in indices:
            anchor_of[index] = (name, len(indices))
        if len(indices) < 2 or not with_steps:
            continue
        values = [returns[index] for index in indices]
        total, count = sum(values), len(values)
        scale = statistics.stdev(values) + settings.epsilon if settings.step_normalize_by_std else 1.0
        for index in indices:
            step[index] = (returns[index] - (total - returns[index]) / (count - 1)) / scale
    credits = []
    for index, key in enumerate(keys):
        advantage = rollout_advantage[key] + settings.step_weight * step[index]
        advantage = advantage * settings.negative_weight if advantage < 0 else advantage
        credits.append(Credit(returns[index], rollout_advantage[key], step[index], advantage, *anchor_of[index]))
    return credits


def settings_from(description: Mapping[str, Any] | None) -> CreditSettings | None:
    """The settings a run recorded (`AdvantageEstimator.describe()` on its rollouts), for the rollout view; None when
    its estimator is not one of these two."""
    if not description or description.get("advantage") not in ("grpo", "anchor"):
        return None
    known = set(CreditSettings.__dataclass_fields__) - {"mode"}
    options = {key: value for key, value in description.items() if key in known}
    if description["advantage"] == "grpo":
        options["step_weight"] = 0.0
    return CreditSettings(mode=description["advantage"], **options)
