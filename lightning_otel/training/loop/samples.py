"""A batch of rollouts -> training samples: one per selected LLM call of a succeeded, rewarded rollout, carrying its
rollout's final reward and its group (the task in this step, per agent with `group_by_agent`); plus the `rollout/*`
metrics that say what was left out and why.

`Sample.advantage` (RL losses) or `Sample.weight` (supervised losses) is set afterwards by the advantage estimator.
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning_otel.adapters.triplets import Triplet
from lightning_otel.runtime.algorithm import BatchResult


@dataclass(slots=True)
class Sample:
    triplet: Triplet  # the call's exact prompt/response token ids, logprobs, mask, agent, rollout
    reward: float  # the rollout's final reward
    group: str  # GRPO's group ("uid" in verl): one task in one step, optionally per agent
    advantage: float | None = None  # set by the estimator; None: the backend's own estimator computes it
    weight: float = 1.0  # supervised losses: how much the sample counts (0: not trained)

    @property
    def uid(self) -> str:
        """verl's name for the group."""
        return self.group

    @property
    def rollout_id(self) -> str:
        return self.triplet.rollout_id or ""


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
            samples.append(Sample(triplet, float(reward), group))
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
