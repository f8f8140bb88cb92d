"""The three shapes a store is exported as, each a function from exported rollouts to rows (plain dicts):

- `sft_rows`: one row per selected call of a rollout: its chat messages (input, then the reply), the tools its
  request offered, and its exact prompt/response token ids and logprobs: supervised fine-tuning on what the policy
  (or a teacher) said.
- `preference_pairs`: rows for DPO from one group (the same task at the same step: a GRPO group): a higher- and a
  lower-reward rollout, at each selected call where both saw the same prompt (same token ids, else the same input
  messages); `PairRule` says which rollouts are paired.
- `rollout_row`: one row per rollout: task input, reward, status, run/step, and every call with its fields.
- "atif": one ATIF trajectory per rollout (`export.atif.rollout_trajectory`), JSON Lines only.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lightning_otel.export.rollouts import ExportedCall, ExportedRollout

SHAPES = ("sft", "pairs", "rollouts", "atif")  # atif: `export.atif`, a trajectory per rollout (JSON Lines)


@dataclass(frozen=True, slots=True)
class PairRule:
    """Which rollouts of a group become (chosen, rejected) pairs.

    `"best-worst"`: one pair per group, the highest against the lowest reward (the first of equals, in queue order);
    `"all"`: every two rollouts whose rewards differ by more than `margin`. Either way a pair needs
    `chosen.reward - rejected.reward > margin` (default 0: strictly better), and `min_chosen_reward`, when set, is
    the least reward a chosen rollout may have."""

    strategy: Literal["best-worst", "all"] = "best-worst"
    margin: float = 0.0
    min_chosen_reward: float | None = None

    def __post_init__(self) -> None:
        if self.strategy not in ("best-worst", "all"):
            raise ValueError(f'pair strategy must be "best-worst" or "all", got {self.strategy!r}')
        if self.margin < 0:
            raise ValueError(f"pair margin must be >= 0, got {self.margin}")

    def rollout_pairs(self, group: Sequence[ExportedRollout]) -> list[tuple[ExportedRollout, ExportedRollout]]:
        rated = [rollout for rollout in group if rollout.reward is not None]
        if self.strategy == "best-worst":
            if len(rated) < 2:
                return []
            candidates = [(max(rated, key=_reward), min(rated, key=_reward))]
        else:
            candidates = [(a, b) if _reward(a) >= _reward(b) else (b, a) for a, b in itertools.combinations(rated, 2)]
        return [
            (chosen, rejected)
            for chosen, rejected in candidates
            if _reward(chosen) - _reward(rejected) > self.margin
            and (self.min_chosen_reward is None or _reward(chosen) >= self.min_chosen_reward)
        ]


def _reward(rollout: ExportedRollout) -> float:
    return float(rollout.reward)  # type: ignore[arg-type]  # rated rollouts only


def _same_prompt(a: ExportedCall, b: ExportedCall) -> bool:
    if a.prompt_token_ids is not None and b.prompt_token_ids is not None:
        return a.prompt_token_ids == b.prompt_token_ids
    return a.input_messages is not None and a.input_messages == b.input_messages


def _has_reply(call: ExportedCall) -> bool:
    return call.response_token_ids is not None or call.output_message is not None


def _rollout_fields(rollout: ExportedRollout) -> dict[str, Any]:
    return {
        "rollout_id": rollout.rollout_id,
        "attempt_id": rollout.attempt_id,
        "task_id": rollout.task_id,
        "group_id": rollout.group_id,
        "run_id": rollout.run_id,
        "step": rollout.step,
        "mode": rollout.mode,
        "reward": rollout.reward,
    }


def sft_rows(rollout: ExportedRollout) -> Iterator[dict[str, Any]]:
    """A row per selected call with token ids or message content (a call with neither teaches nothing)."""
    for call in rollout.selected_calls:
        if not _has_reply(call):
            continue
        messages = None
        if call.input_messages is not None and call.output_message is not None:
            messages = [*call.input_messages, call.output_message]
        yield {
            **_rollout_fields(rollout),
            "call_index": call.index,
            "span_id": call.span_id,
            "response_id": call.response_id,
            "agent": call.agent,
            "call_reward": call.reward,
            "policy_version": call.policy_version,
            "messages": messages,
            "tools": call.tools,
            "prompt_token_ids": call.prompt_token_ids,
            "response_token_ids": call.response_token_ids,
            "response_logprobs": call.response_logprobs,
        }


@dataclass(slots=True)
class PairCounts:
    pairs: int = 0
    rollout_pairs: int = 0  # (chosen, rejected) rollouts the rule formed
    prompts_differ: int = 0  # selected calls at the same place whose prompts differ: not a pair
    identical_replies: int = 0  # the same reply on both sides: nothing to prefer
    differing_agents: dict[str, int] = field(default_factory=dict)  # agent -> its calls whose prompts differed


def preference_pairs(
    group: Sequence[ExportedRollout], rule: PairRule, counts: PairCounts | None = None
) -> Iterator[dict[str, Any]]:
    """DPO rows from one group: for each (chosen, rejected) rollout pair of `rule`, the selected calls at the same
    place in both (first with first, ...) that saw the same prompt and replied differently."""
    counts = counts if counts is not None else PairCounts()
    for chosen, rejected in rule.rollout_pairs(group):
        counts.rollout_pairs += 1
        for good, bad in zip(chosen.selected_calls, rejected.selected_calls, strict=False):
            if not (_has_reply(good) and _has_reply(bad)):
                continue
            if not _same_prompt(good, bad):
                counts.prompts_differ += 1
                agent = good.agent or "(unnamed)"
                counts.differing_agents[agent] = counts.differing_agents.get(agent, 0) + 1
                continue
            if (good.response_token_ids, good.output_message) == (bad.response_token_ids, bad.output_message):
                counts.identical_replies += 1
                continue
            counts.pairs += 1
            yield {
                "group_id": chosen.group_id,
                "task_id": chosen.task_id,
                "run_id": chosen.run_id,
                "step": chosen.step,
                "agent": good.agent,
                "call_index": good.index,
                "prompt": good.input_messages,
                "tools": good.tools,  # the same prompt on both sides: the same tools
                "chosen": [good.output_message] if good.output_message is not None else None,
                "rejected": [bad.output_message] if bad.output_message is not None else None,
                "prompt_token_ids": good.prompt_token_ids,
                "chosen_token_ids": good.response_token_ids,
                "rejected_token_ids": bad.response_token_ids,
                "chosen_logprobs": good.response_logprobs,
                "rejected_logprobs": bad.response_logprobs,
                "chosen_reward": chosen.reward,
                "rejected_reward": rejected.reward,
                "chosen_rollout_id": chosen.rollout_id,
                "rejected_rollout_id": rejected.rollout_id,
            }


def rollout_row(rollout: ExportedRollout) -> dict[str, Any]:
    """The whole rollout; `input` (the task, any JSON) as JSON text so every format holds it as it was."""
    return {
        **_rollout_fields(rollout),
        "status": rollout.status,
        "policy_version": rollout.policy_version,
        "input": json.dumps(rollout.input, ensure_ascii=False),
        "calls": [call.json() for call in rollout.calls],
    }
