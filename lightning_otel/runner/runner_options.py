"""A runner's settings as one value: `RunnerOptions`, taken whole by `Runner`, a runner process's main and the
pools that start runners (the Trainer's processes, Ray actors, `lightning-otel runner`).

    agl.run_runner_processes(agent, "http://trainer-host:16686", n_runners=2,
                             options=agl.RunnerOptions(max_concurrency=32))
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lightning_otel.runner.attempt_watch import RolloutLimits


@dataclass(frozen=True, slots=True)
class RunnerOptions:
    """`max_concurrency`: rollouts one runner runs at once; `auth_token`: the collector's bearer token;
    `capture_content`: record message content on LLM spans (None: as the environment says); `max_rollouts`: exit
    after claiming and finishing that many (None: no limit); `stop_when_training_ends`: exit when a training on this
    collector publishes its end, or after `idle_stop_s` without work while no training runs (a runner started on its
    own: `lightning-otel runner`'s default); `otlp_endpoint`: where spans go (None: the collector says);
    `claim_wait_s`: how long one claim waits for work; `run_id`: the run this runner serves, and it stops when that
    run ends (the Trainer's runners: its run); None: the queue chooses (the run of the oldest rollout waiting) and
    the runner follows that run until it ends, then stops or, with `stop_when_training_ends=False`, takes the next;
    `limits`: per-rollout limits and no-progress rules (`RolloutLimits`), read live from the rollout's spans;
    `policy_failure_reward`: what a policy failure trains with (a rollout the model's output broke, or stopped by a
    limit)."""

    max_concurrency: int = 16
    auth_token: str | None = None
    capture_content: bool | None = None
    max_rollouts: int | None = None
    stop_when_training_ends: bool = False
    idle_stop_s: float = 600.0
    otlp_endpoint: str | None = None
    claim_wait_s: float = 10.0
    run_id: str | None = None
    limits: RolloutLimits = field(default_factory=RolloutLimits)
    policy_failure_reward: float = 0.0

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        if self.max_rollouts is not None and self.max_rollouts < 1:
            raise ValueError("max_rollouts must be >= 1 (rollouts per runner) or None (no limit)")
        if self.idle_stop_s <= 0 or self.claim_wait_s < 0:
            raise ValueError(f"idle_stop_s must be > 0 and claim_wait_s >= 0, got {self.idle_stop_s}, "
                             f"{self.claim_wait_s}")  # fmt: skip


__all__ = ["RunnerOptions"]
