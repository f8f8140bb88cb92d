"""Refilled groups (`TrainingOptions(refill_tied_groups=...)`, `training.loop.refill`): a step's group whose rewards
all tie is made up for by groups of further tasks, drawn from the training set (never the step's own), tasks known
to tie last, within the bound; what was drawn is in the step's metrics."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

import lightning_otel as agl
from lightning_otel.adapters.diagnostics import RolloutDiagnostics
from lightning_otel.adapters.triplets import AdaptedRollout
from lightning_otel.runtime.rollout_batch import BatchResult, RolloutBatch
from lightning_otel.training.loop.refill import TaskPool, group_rewards, refill

GROUP = 3
_ids = itertools.count()


def ran(tasks: list[dict[str, Any]]) -> BatchResult:
    """`tasks` run GROUP times each, as the queue and the adapter would give them back: a task's `rewards` are its
    group's rewards."""
    batch_id = f"b{next(_ids)}"
    records, rollouts, adapted = [], [], {}
    for index, task in enumerate(tasks):
        for reward in task["rewards"]:
            rollout_id = f"{batch_id}-r{len(records)}"
            record = {"rollout_id": rollout_id, "group_id": f"{batch_id}/t{index}", "input": task}
            records.append(record)
            rollouts.append({**record, "status": "succeeded", "reward": reward})
            adapted[rollout_id] = AdaptedRollout([], reward, RolloutDiagnostics(rollout_id))
    batch = RolloutBatch(batch_id, "train", [r["rollout_id"] for r in records], records)
    return BatchResult(batch, rollouts, {}, adapted)


WON, LOST = {"rewards": [1.0] * GROUP}, {"rewards": [0.0] * GROUP}


def mixed(k: int) -> dict[str, Any]:
    return {"k": k, "rewards": [0.0, 1.0, 0.0]}


def test_tied_groups_are_made_up_for_by_further_tasks_the_step_does_not_hold() -> None:
    won, lost = dict(WON), dict(LOST)
    tasks = [won, lost, mixed(0), mixed(1), mixed(2), dict(LOST)]
    pool, asked = TaskPool(tasks, seed=1), []

    def run_more(extra: list[dict[str, Any]]) -> BatchResult:
        asked.append(extra)
        return ran(extra)

    batch, metrics = refill(ran([won, lost]), [won, lost], pool, 2.0, run_more)
    drawn = [task for extra in asked for task in extra]
    assert won not in drawn and lost not in drawn  # never the step's own tasks
    informative = [rewards for rewards in group_rewards(batch).values() if max(rewards) > min(rewards)]
    assert len(informative) == 2, metrics  # as many differing groups as the step has tasks, or the bound reached
    assert metrics["refill/tasks_drawn"] == len(drawn) <= 4
    assert metrics["refill/tied_groups"] + metrics["refill/informative_groups"] == metrics["refill/groups"]
    assert len(batch.batch.records) == GROUP * (2 + len(drawn))  # the tied groups stay in the step


def test_the_bound_holds_and_tasks_known_to_tie_are_drawn_last() -> None:
    tasks = [dict(WON) for _ in range(6)] + [mixed(0)]
    pool = TaskPool(tasks, seed=0)
    for index in range(1, 6):  # every won task has tied before
        pool.record(index, WON["rewards"])
    step = [tasks[0]]
    _, metrics = refill(ran(step), step, pool, 1.0, ran)
    assert metrics["refill/tasks_drawn"] == 1.0  # one task's worth: the bound
    assert metrics["refill/informative_groups"] == 1.0  # and it was the task not known to tie
    assert pool.pass_rate(6) == pytest.approx(1 / 3) and pool.ties(1) and not pool.ties(6)


def test_nothing_is_drawn_when_the_step_already_learns() -> None:
    step = [mixed(0), mixed(1)]
    _, metrics = refill(ran(step), step, TaskPool(step), 2.0, lambda extra: pytest.fail(f"drew {extra}"))
    assert metrics["refill/tasks_drawn"] == 0.0 and metrics["refill/informative_groups"] == 2.0


def test_refill_is_a_synchronous_steps_setting() -> None:
    with pytest.raises(ValueError, match="refill_tied_groups runs with synchronous steps"):
        agl.TrainingOptions(refill_tied_groups=1.0, max_staleness=1)
    with pytest.raises(ValueError, match="refill_tied_groups must be >= 0"):
        agl.TrainingOptions(refill_tied_groups=-1.0)


def test_a_training_step_refills_through_the_loop_and_says_so(collector: str, tmp_path: Path) -> None:
    """The step's own tasks both tie (their reward is constant); the loop runs drawn tasks as the same step (under
    its number in the rollout view) with the step's sampling, trains on their groups, and counts them."""
    from lightning_otel.collector import Client
    from lightning_otel.training.loop.loop import TrainingLoop
    from tests.training.backends import RecordingBackend

    options = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=2, group_size=3, max_steps=1, shuffle=False),
        sampling=agl.Sampling(max_tokens=16), refill_tied_groups=1.0,
    )  # fmt: skip
    tasks = [{"task_id": f"t{i}", "question": f"Question {i}?", "constant": i < 2} for i in range(5)]
    backend = RecordingBackend(tmp_path)
    trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=TrainingLoop(backend, options),
                          progress=False)  # fmt: skip
    (record,) = trainer.fit("tests.training.agents:length_agent", tasks).steps
    metrics, drawn = record.metrics, record.metrics["refill/tasks_drawn"]
    assert 1 <= drawn <= 2 and metrics["refill/groups"] == 2 + drawn  # the bound: 1 x the step's 2 tasks
    assert metrics["refill/informative_groups"] >= 1 and metrics["refill/tied_groups"] >= 2
    assert metrics["rollout/rollouts"] == 3 * (2 + drawn)
    ((_, samples),) = backend.updates  # the drawn groups trained with the step
    assert {sample.group for sample in samples if sample.advantage} and len(samples) == 3 * (2 + drawn)
    with Client(collector) as client:
        steps = {record["metadata"]["step"] for record in client.queued_rollouts(limit=100)}
    assert steps == {1}  # the refill ran as step 1
