"""A batch of rollouts -> training samples: one per selected LLM call of a succeeded, rewarded rollout, carrying its
rollout's final reward and its group (the task in this step, per agent with `group_by_agent`); plus the `rollout/*`
metrics that say what was left out and why.

`Sample.advantage` (RL losses) or `Sample.weight` (supervised losses) is set afterwards by the advantage estimator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lightning_otel.adapters.triplets import Triplet
from lightning_otel.runtime.rollout_batch import BatchResult


@dataclass(slots=True)
class Sample:
    triplet: Triplet | None  # the call's exact prompt/response token ids, logprobs, mask, agent, rollout
    reward: float  # the rollout's final reward
    group: str  # GRPO's group ("uid" in verl): one task in one step, optionally per agent
    advantage: float | None = None  # set by the estimator; None: the backend's own estimator computes it
    weight: float = 1.0  # supervised losses: how much the sample counts (0: not trained)
    example: dict[str, Any] | None = None  # the call as chat messages, for backends that learn from text (SFT)
    rollout: str = ""  # the rollout it came from (the triplet's, when there is one)
    step_rewards_total: float = 0.0  # the rollout's step rewards (intermediate and process rewards; credit module)
    credit: Any = None  # set by credit-assigning estimators: the call's return and advantage parts
    staleness: int = 0  # asynchronous training: policy versions between its sampler and the trained policy
    token_advantages: list[float] | None = None  # per response token, added to `advantage` (distillation's signal)
    teacher_logprobs: list[float] | None = None  # on-policy distillation: the teacher's logprob of each response token

    def __post_init__(self) -> None:
        if not self.rollout and self.triplet is not None:
            self.rollout = self.triplet.rollout_id or ""

    @property
    def uid(self) -> str:
        """verl's name for the group."""
        return self.group

    @property
    def rollout_id(self) -> str:
        return self.rollout


def samples_from(result: BatchResult, *, group_by_agent: bool = False) -> tuple[list[Sample], dict[str, float]]:
    """Training samples of a batch: every selected triplet of a succeeded rollout, with the rollout's outcome reward
    (its final reward) and the task's group (per agent too with `group_by_agent`). Rollouts without a reward or
    without usable token ids are counted and left out."""
    group_of = {record["rollout_id"]: record["group_id"] for record in result.rollouts}
    rewards = result.rewards()
    samples: list[Sample] = []
    without_reward = 0
    rollout_reward_by_group: dict[str, list[float]] = {}
    for rollout_id, adapted in result.adapted.items():
        reward = rewards.get(rollout_id)
        if reward is None:
            without_reward += 1
            continue
        if not adapted.triplets:
            continue
        rollout_reward_by_group.setdefault(group_of[rollout_id], []).append(float(reward))
        for triplet in adapted.triplets:
            group = group_of[rollout_id] + (f"/{triplet.agent_name}" if group_by_agent else "")
            samples.append(Sample(triplet, float(reward), group, step_rewards_total=adapted.step_rewards_total))
    zero_variance = sum(1 for values in rollout_reward_by_group.values() if len(set(values)) <= 1)
    batch = result.metrics()
    trained_rollouts = sum(len(values) for values in rollout_reward_by_group.values())
    runners = {runner for runner in result.runners().values() if runner}
    metrics = {f"rollout/{key}": float(value) for key, value in batch.items() if key not in ("wall_s", "wait_s")}
    metrics["timing_s/gen_wait"] = result.wait_s  # until every rollout was final
    metrics["timing_s/gen_read_adapt"] = result.wall_s - result.wait_s  # spans in one call, adapted
    metrics.update(
        {
            "rollout/with_samples": float(trained_rollouts),
            "rollout/without_reward": float(without_reward),
            "rollout/triplets_per_rollout": len(samples) / trained_rollouts if trained_rollouts else 0.0,
            "rollout/groups": float(len(rollout_reward_by_group)),
            "rollout/zero_variance_groups": float(zero_variance),
            "rollout/runners": float(len(runners)),
        }
    )
    return samples, metrics


def message_samples(
    result: BatchResult, agent_match: str | None, *, group_by_agent: bool = False
) -> tuple[list[Sample], dict[str, float]]:
    """Samples as chat examples (`TraceToMessages`: the call's input messages and its reply; message content must be
    on the spans) for backends that learn from text; the same selection and metrics as `samples_from`, plus
    `rollout/calls_without_content`."""
    from lightning_otel.adapters.messages import TraceToMessages

    _, metrics = samples_from(result, group_by_agent=group_by_agent)
    to_messages = TraceToMessages(agent_match=agent_match)
    group_of = {record["rollout_id"]: record["group_id"] for record in result.rollouts}
    samples = []
    for rollout_id, reward in result.rewards().items():
        if reward is None:
            continue
        for example in to_messages.adapt(result.spans.get(rollout_id, [])):
            samples.append(Sample(None, float(reward), group_of[rollout_id], example=example, rollout=rollout_id))
    metrics["rollout/calls_without_content"] = float(to_messages.calls_without_content)
    return samples, metrics


def trained_samples(
    samples: Sequence[Sample], metrics: Mapping[str, float] | None = None
) -> list[tuple[str, str, int]]:
    """(rollout, attempt, sampling policy version; -1: not recorded) of each sample an update was given: the step's
    record of what it trained (its span's `agl.training.trained.*`). With a policy per agent, the samples of a policy
    the update skipped (`policy/<name>/skipped` 1 in its metrics) were not trained and are left out."""
    metrics = metrics or {}
    return [
        (sample.rollout, sample.triplet.attempt_id or "", -1 if sample.triplet.policy_version is None
         else sample.triplet.policy_version)
        for sample in samples
        if sample.triplet is not None
        and not (sample.triplet.policy and metrics.get(f"policy/{sample.triplet.policy}/skipped") == 1.0)
    ]  # fmt: skip
