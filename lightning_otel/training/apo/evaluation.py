"""Running the agent with a candidate prompt: the prompt is published as a version of the resources (the others as
they were), the batch's rollouts are pinned to that version (candidates never mix), and each rollout comes back
as a `RolloutReport` read from its spans (messages, reward, status)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from lightning_otel.adapters.messages import TraceToMessages
from lightning_otel.agent_api.resources import PromptTemplate
from lightning_otel.runtime.training_run import TrainingRun
from lightning_otel.training.apo.critique import RolloutReport

log = logging.getLogger("lightning_otel.apo")


class PromptEvaluator:
    """Evaluates templates of the resource `resource_name` on tasks, through the run's queue and runners."""

    def __init__(self, run: TrainingRun, resource_name: str, seed: PromptTemplate, timeout_s: float) -> None:
        self.run, self.resource_name, self.engine, self.timeout_s = run, resource_name, seed.engine, timeout_s
        self.base = dict(run.latest_resources())
        self._versions: dict[str, int] = {}  # template -> its resources version (published once)
        self.rollouts = 0

    def version_of(self, template: str) -> int:
        if template not in self._versions:
            resources = {**self.base, self.resource_name: PromptTemplate(template=template, engine=self.engine)}
            self._versions[template] = self.run.update_resources(resources)
        return self._versions[template]

    def evaluate(self, template: str, tasks: Sequence[Any], *, mode: str, note: str) -> list[RolloutReport]:
        """One rollout per task with `template`; the reports in the tasks' order."""
        version = self.version_of(template)
        batch = self.run.submit(list(tasks), mode=mode, resources_version=version, metadata={"note": note})
        result = self.run.collect(batch, timeout=self.timeout_s)
        self.rollouts += len(batch.rollout_ids)
        rewards = result.rewards()
        records = {record["rollout_id"]: record for record in result.rollouts}
        reports = []
        for task, rollout_id in zip(tasks, batch.rollout_ids, strict=True):
            record = records.get(rollout_id, {})
            messages = TraceToMessages().adapt(result.spans.get(rollout_id, []))
            reports.append(
                RolloutReport(
                    task=task,
                    rollout_id=rollout_id,
                    status=str(record.get("status", "unknown")),
                    reward=rewards.get(rollout_id),
                    error=record.get("error"),
                    conversations=[example["messages"] for example in messages],
                )
            )
        failed = sum(1 for report in reports if report.status != "succeeded")
        if failed:
            log.warning("%s: %d of %d rollouts did not succeed (scored 0)", note, failed, len(reports))
        return reports
