"""Asynchronous training (`max_staleness`) end to end with a backend of our own whose updates take time: runner
processes keep running the next steps' groups while it updates; no trained sample is older than the bound (checked
against the policy versions on the LLM spans); groups that grew too old are dropped, counted and run again; every
scheduled task is trained exactly once; a runner that dies mid-step does not stall the pipeline; `max_staleness=0`
is the synchronous step, batch for batch."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
import pytest

import lightning_otel as agl
from lightning_otel.training.loop.backend import Backend
from lightning_otel.training.loop.loop import TrainingLoop
from lightning_otel.training.loop.schedule import Schedule
from tests.helpers import assert_staleness_by_the_spans
from tests.training.backends import RecordingBackend

AGENT = "tests.training.agents:slow_length_agent"


def train(collector: str, backend: Backend, tasks: list[dict], *, max_staleness: int, n_runners: int = 1,
          **schedule: int) -> agl.TrainingResult:  # fmt: skip
    options = agl.TrainingOptions(
        schedule=Schedule(batch_size=2, group_size=3, val_every=0, **schedule),
        sampling=agl.Sampling(max_tokens=16),
        max_staleness=max_staleness,
    )
    loop = TrainingLoop(backend, options)
    trainer = agl.Trainer(n_runners=n_runners, collector=collector, algorithm=loop, progress=False)
    return trainer.fit(AGENT, tasks)


def _trained_tasks(backend: RecordingBackend) -> Counter[str]:
    return Counter(sample.triplet.task_id for _, samples in backend.updates for sample in samples)


def test_the_staleness_bound_holds_on_the_spans_versions_and_stale_groups_are_dropped_and_run_again(
    collector: str, tmp_path: Path
) -> None:
    # one slow task (5 s of tool time after its call): by the time it is complete, the policy is 2+ versions on
    tasks = [{"task_id": f"t{i}", "question": f"Question {i}?", **({"sleep_s": 5.0} if i == 0 else {})}
             for i in range(8)]  # fmt: skip
    backend = RecordingBackend(tmp_path, update_s=0.5)
    result = train(collector, backend, tasks, max_staleness=1, max_steps=4)
    assert [record.step for record in result.steps] == [1, 2, 3, 4]
    assert not any(record.skipped_because for record in result.steps)
    for record, (step, samples) in zip(result.steps, backend.updates, strict=True):
        trained_version = int(record.metrics["training/policy_version"])
        for sample in samples:  # the bound, against the version the replica named on the call's span
            assert sample.triplet.policy_version is not None
            assert trained_version - sample.triplet.policy_version <= 1, (step, trained_version, sample.triplet)
            assert sample.staleness == trained_version - sample.triplet.policy_version
        assert record.metrics["async/staleness_max"] <= 1
    assert_staleness_by_the_spans(collector, result.steps, max_staleness=1)  # the metric is what the spans say
    # the runners ran the next step's groups while the backend updated: older samples were trained
    assert sum(record.metrics.get("async/staleness_1", 0) for record in result.steps) > 0
    # the next step's groups were in flight when each step took its groups (the last step has none left)
    assert all(record.metrics["async/carried_over_groups"] >= 1 for record in result.steps[:-1])
    dropped = sum(record.metrics["async/dropped_stale_groups"] for record in result.steps)
    assert dropped >= 1  # the slow task's first group: counted, and its task run again
    assert _trained_tasks(backend) == Counter({f"t{i}": 3 for i in range(8)})  # every task once, none lost
    for record in result.steps:
        assert 0.0 <= record.metrics["rollout/runner_idle_share"] <= 1.0
        assert record.metrics["async/gateway_pause_s"] >= 0.0
    # the rollout view says the run was asynchronous, and which versions sampled each rollout it queued
    (run,) = httpx.get(f"{collector}/v1/ui/runs").json()["runs"]
    assert run["max_staleness"] == 1
    step = httpx.get(f"{collector}/v1/ui/runs/{run['run_id']}/train/2").json()
    assert step["max_staleness"] == 1 and sum(step["sampled_versions"].values()) == len(step["rollouts"])
    assert all(row["sampled_versions"] for row in step["rollouts"] if row["status"] == "succeeded")
    # and the trainer's own metrics for that step (its agl.training.step span): what the progress line showed
    trained = step["trainer_metrics"]
    assert trained["async/staleness_max"] == result.steps[1].metrics["async/staleness_max"] <= 1
    assert trained["training/samples"] == 6 and "async/gateway_pause_s" in trained
    # and which of the page's rollouts it trained (asynchronous: others were queued under an earlier step), as many
    # samples of each as the backend was given
    (_, step_2_samples) = backend.updates[1]
    given = Counter(sample.rollout for sample in step_2_samples)
    rows = step["rollouts"]
    assert [row["trained_samples"] for row in rows] == [given[row["rollout_id"]] for row in rows]


def test_a_runner_dying_mid_step_does_not_stall_the_pipeline(collector: str, tmp_path: Path) -> None:
    marker = tmp_path / "died"
    tasks = [{"task_id": f"t{i}", "question": f"Question {i}?", **({"die_once": str(marker)} if i == 1 else {})}
             for i in range(6)]  # fmt: skip
    backend = RecordingBackend(tmp_path, update_s=0.3)
    result = train(collector, backend, tasks, max_staleness=1, n_runners=2, max_steps=3)
    assert marker.exists()  # a runner died with the rollout running
    assert [record.step for record in result.steps] == [1, 2, 3]
    assert sum(record.metrics["rollout/retried"] for record in result.steps) >= 1
    assert _trained_tasks(backend) == Counter({f"t{i}": 3 for i in range(6)})


def test_max_staleness_0_is_the_synchronous_step_batch_for_batch(collector: str, tmp_path: Path) -> None:
    tasks = [{"task_id": f"t{i}", "question": f"Question {i}?"} for i in range(4)]
    backend = RecordingBackend(tmp_path)
    result = train(collector, backend, tasks, max_staleness=0, max_steps=2)
    steps = Schedule(batch_size=2, group_size=3).steps(tasks)
    for (_, samples), scheduled in zip(backend.updates, steps, strict=True):
        assert Counter(s.triplet.task_id for s in samples) == Counter({t["task_id"]: 3 for t in scheduled})
        assert {s.staleness for s in samples} == {0}
    assert not any(key.startswith("async/") for record in result.steps for key in record.metrics)
    assert [record.metrics["training/policy_version"] for record in result.steps] == [0.0, 1.0]


def test_a_backend_that_cannot_serve_while_it_updates_refuses_max_staleness(tmp_path: Path) -> None:
    backend = RecordingBackend(tmp_path)
    backend.serves_while_updating, backend.why_not_async = False, "its replicas sleep while it trains"
    with pytest.raises(ValueError, match=r"cannot serve the policy while it updates \(its replicas sleep"):
        TrainingLoop(backend, agl.TrainingOptions(max_staleness=1))
