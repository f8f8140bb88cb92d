"""Held-out rewards of a model folder, measured as the training loop's validation measures them: the folder served
as vLLM serves it, a policy gateway in front enforcing the sampling, the val tasks run by the runners.

    trainer = Trainer(n_runners=2, algorithm=HeldOutRewards(url, "agl-policy", greedy, sampled, samples=4), ...)
    greedy_rewards, sampled_rewards = trainer.fit(agent, None, val_tasks)

What the SFT backend's verdict needs: SFT fine-tunes after its last step, so the loop cannot validate the model it
made; the base folder and the fine-tuned one are measured alike, before and after.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightning_otel.agent_api.resources import ProxyLLM
from lightning_otel.runtime.algorithm import Algorithm
from lightning_otel.runtime.training_run import TrainingRun
from lightning_otel.training.loop.step_summary import task_means


class HeldOutRewards(Algorithm):
    """Each val task once at `greedy` sampling and `samples` times at `sampled` (0: not at all); returns (each task's
    greedy reward, each task's mean sampled reward or None). `policy_resource`: the resource agents read."""

    def __init__(
        self,
        endpoint: str,
        model: str,
        greedy: Mapping[str, Any],
        sampled: Mapping[str, Any],
        *,
        samples: int,
        policy_resource: str = "main_llm",
    ) -> None:
        self.endpoint, self.model = endpoint, model
        self.greedy, self.sampled, self.samples = dict(greedy), dict(sampled), samples
        self.policy_resource = policy_resource

    def run(
        self, run: TrainingRun, train_dataset: Sequence[Any] | None, val_dataset: Sequence[Any] | None
    ) -> tuple[list[float], list[float] | None]:
        from lightning_otel.serving.gateway_run import gateway_for_run

        tasks = list(val_dataset or [])
        if not tasks:
            raise ValueError("HeldOutRewards needs val tasks")
        served = gateway_for_run(run, [self.endpoint], sampling=self.sampled, validation_sampling=self.greedy,
                                 model=self.model)  # fmt: skip
        with served as (gateway, server):
            policy = ProxyLLM(server.base_url, self.model, sampling_parameters=self.greedy)
            run.update_resources({**run.latest_resources(), self.policy_resource: policy})
            greedy = self._rewards(run, gateway, tasks, sampling="val", n=1)
            sampled = self._rewards(run, gateway, tasks, sampling="train", n=self.samples) if self.samples else None
        return greedy, sampled

    @staticmethod
    def _rewards(run: TrainingRun, gateway: Any, tasks: list[Any], *, sampling: str, n: int) -> list[float]:
        gateway.set_mode(sampling)
        batch = run.run_batch(tasks, n=n, mode="val")
        rewards = {rollout: float(reward) for rollout, reward in batch.rewards().items() if reward is not None}
        return task_means(batch, rewards)


__all__ = ["HeldOutRewards"]
