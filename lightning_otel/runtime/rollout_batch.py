"""A batch of rollouts as an algorithm sees it: `RolloutBatch` (what was queued) and `BatchResult` (what came
back: the final queue records, each succeeded rollout's spans and their adapted samples, and the counts of what was
left out and why)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from lightning_otel.adapters.triplets import AdaptedRollout, Triplet
from lightning_otel.collector.queue_schema import FINAL_STATUSES
from lightning_otel.flat_span import Span
from lightning_otel.runner.failure_causes import kind_of


@dataclass(slots=True)
class RolloutBatch:
    batch_id: str
    mode: str
    rollout_ids: list[str]
    records: list[dict[str, Any]]  # as enqueued: task_id, group_id, input


@dataclass(slots=True)
class BatchResult:
    batch: RolloutBatch
    rollouts: list[dict[str, Any]]  # final queue records (status, reward, attempts, error)
    spans: dict[str, list[Span]]  # succeeded rollouts' spans (the succeeded attempt only)
    adapted: dict[str, AdaptedRollout]  # succeeded rollouts, adapted
    wall_s: float = 0.0
    wait_s: float = 0.0  # of wall_s: until every rollout was final (the rest: reading spans and adapting them)
    incomplete: dict[str, int] = field(default_factory=dict)  # rollouts read with parents missing -> how many
    gateway_calls: int | None = None  # calls the policy gateway served for the succeeded attempts (None: no gateway)

    def triplets(self) -> list[Triplet]:
        return [triplet for adapted in self.adapted.values() for triplet in adapted.triplets]

    def groups(self, *, by_agent: bool = False) -> dict[Any, list[Triplet]]:
        """Triplets by the rollout's group (one per task per batch), or by (group, agent name)."""
        group_of = {record["rollout_id"]: record["group_id"] for record in self.rollouts}
        grouped: dict[Any, list[Triplet]] = {}
        for rollout_id, adapted in self.adapted.items():
            for triplet in adapted.triplets:
                key = (group_of[rollout_id], triplet.agent_name) if by_agent else group_of[rollout_id]
                grouped.setdefault(key, []).append(triplet)
        return grouped

    def tasks(self) -> dict[str, Any]:
        """Each rollout's task, as enqueued."""
        return {record["rollout_id"]: record.get("input") for record in self.batch.records}

    def runners(self) -> dict[str, str | None]:
        """The runner that ran each rollout (its latest attempt's; None: never claimed)."""
        return {record["rollout_id"]: record.get("runner_id") for record in self.rollouts}

    def rewards(self) -> dict[str, float | None]:
        """Final reward per rollout (from the trace; the queue's record when the trace has none)."""
        by_id = {record["rollout_id"]: record for record in self.rollouts}
        return {
            rollout_id: adapted.final_reward if adapted.final_reward is not None else by_id[rollout_id]["reward"]
            for rollout_id, adapted in self.adapted.items()
        }

    def metrics(self) -> dict[str, float]:
        statuses = [record["status"] for record in self.rollouts]
        kinds = [(record["status"], kind_of(record.get("cause"))) for record in self.rollouts]
        rewards = [reward for reward in self.rewards().values() if reward is not None]
        diagnostics = [adapted.diagnostics for adapted in self.adapted.values()]
        return {
            "rollouts": len(self.rollouts),
            "succeeded": statuses.count("succeeded"),
            "failed": statuses.count("failed"),
            "timeout": statuses.count("timeout"),
            "cancelled": statuses.count("cancelled"),
            "unfinished": sum(1 for status in statuses if status not in FINAL_STATUSES),
            "retried": sum(1 for record in self.rollouts if record["attempts"] > 1),
            # by cause (`agl.failure_rule`): infrastructure failures past their attempts (not trained), policy
            # failures (trained with their reward), the agent's own errors (not trained)
            "failed_infrastructure": sum(kinds.count((status, "infrastructure")) for status in ("failed", "timeout")),
            "policy_failures": kinds.count(("succeeded", "policy")),
            "failed_agent_error": kinds.count(("failed", "agent_error")),
            "reward_mean": statistics.fmean(rewards) if rewards else float("nan"),
            "triplets": len(self.triplets()),
            "rollouts_without_triplets": sum(1 for adapted in self.adapted.values() if not adapted.triplets),
            "calls_without_token_ids": sum(d.calls_without_token_ids for d in diagnostics),
            "merge_breaks": sum(d.merge_breaks for d in diagnostics),
            "duplicate_calls": sum(d.duplicate_calls for d in diagnostics),  # one call seen by client and gateway
            "harness_copies": sum(d.harness_copies for d in diagnostics),  # a harness's spans joined to the gateway's
            "incomplete_rollouts": len(self.incomplete),
            **({"gateway_calls": self.gateway_calls} if self.gateway_calls is not None else {}),
            "wall_s": self.wall_s,
            "wait_s": self.wait_s,
        }
