"""The training loop end to end with a backend of our own (the way a user adds one): runner processes call the
policy gateway in front of the backend's replica (the test server, vLLM-format token ids), their spans reach a real
collector, the loop estimates advantages, updates, publishes versions, validates and saves on its schedule, resumes,
and says loudly when no step could train."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import lightning_otel as agl
from lightning_otel.training.loop.backend import Backend
from lightning_otel.training.loop.loop import TrainingLoop
from lightning_otel.training.loop.metrics import LOOP_METRICS, SUPERVISED_METRICS, console_line
from lightning_otel.training.loop.samples import Sample
from lightning_otel.training.loop.schedule import Schedule
from tests.training.backends import RecordingBackend

AGENT = "tests.training.agents:length_agent"
TASKS = [{"task_id": f"t{i}", "question": f"Question {i}?"} for i in range(4)]


def train(collector: str, backend: Backend, tasks: list[dict], **schedule: int) -> agl.TrainingResult:
    options = agl.TrainingOptions(
        schedule=Schedule(batch_size=2, group_size=3, **schedule), sampling=agl.Sampling(max_tokens=16)
    )
    loop = TrainingLoop(backend, options)
    trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=loop, progress=False)
    return trainer.fit(AGENT, tasks, TASKS[:1])


def test_each_step_trains_the_grpo_advantages_and_serves_the_next_version(collector: str, tmp_path: Path) -> None:
    backend = RecordingBackend(tmp_path)
    result = train(collector, backend, TASKS, max_steps=3, val_every=2, save_every=2)
    assert [record.step for record in result.steps] == [1, 2, 3]
    assert [step for step, _ in backend.updates] == [1, 2, 3]
    for record, (_, samples) in zip(result.steps, backend.updates, strict=True):
        assert record.skipped_because == [] and record.metrics["training/skipped_step"] == 0
        assert record.metrics["rollout/rollouts"] == 6 and record.metrics["training/samples"] == 6 == len(samples)
        assert set(record.metrics) >= set(LOOP_METRICS) - set(SUPERVISED_METRICS)  # the one table, every step
        by_group: dict[str, list[Sample]] = {}
        for sample in samples:
            by_group.setdefault(sample.group, []).append(sample)
        assert len(by_group) == 2 and all(len(group) == 3 for group in by_group.values())
        for group in by_group.values():  # GRPO: advantages sum to zero in a group and follow the rewards
            assert abs(sum(s.advantage for s in group)) < 1e-6
            ranked = sorted(group, key=lambda s: s.reward)
            assert ranked[0].advantage <= ranked[-1].advantage
    # the version each step sampled with: 0 the first weights, then the step after which they were published
    assert [record.metrics["training/policy_version"] for record in result.steps] == [0.0, 1.0, 2.0]
    assert [record.step for record in result.validations] == [0, 2, 3]
    assert result.validations[0].metrics["val/rollouts"] == 1
    assert [Path(path).name for path in result.checkpoints] == ["step-2.json", "step-3.json"]
    # each step's span names what it trained: here every rollout of the step, one sample each (the rollout view)
    run_id = httpx.get(f"{collector}/v1/ui/runs").json()["runs"][0]["run_id"]
    for record in result.steps:
        page = httpx.get(f"{collector}/v1/ui/runs/{run_id}/train/{record.step}").json()
        assert sorted(row["rollout_id"] for row in page["rollouts"]) == sorted(record.rollout_ids)
        assert [row["trained_samples"] for row in page["rollouts"]] == [1] * 6
        assert sorted(rollout for rollout, _, _ in record.trained) == sorted(record.rollout_ids)


def test_training_resumes_after_the_latest_checkpoint(collector: str, tmp_path: Path) -> None:
    train(collector, RecordingBackend(tmp_path), TASKS, max_steps=2, save_every=2)
    backend = RecordingBackend(tmp_path, resume=True)
    result = train(collector, backend, TASKS, max_steps=4, save_every=2)
    assert [record.step for record in result.steps] == [3, 4] and [step for step, _ in backend.updates] == [3, 4]
    assert result.steps[0].metrics["training/policy_version"] == 2.0  # the saved policy's version


def test_a_step_whose_rewards_never_vary_is_skipped_and_a_run_of_them_raises(collector: str, tmp_path: Path) -> None:
    mixed = [{**task, "constant": index < 2} for index, task in enumerate(TASKS)]  # step 1 constant, step 2 not
    backend = RecordingBackend(tmp_path)
    result = train(collector, backend, mixed, max_steps=2)
    first, second = result.steps
    assert first.metrics["training/skipped_step"] == 1 and second.metrics["training/skipped_step"] == 0
    assert first.skipped_because[0].startswith("every group's rewards were equal (2 of 2 groups)")
    assert [step for step, _ in backend.updates] == [2]  # the skipped step never reached the backend
    # one version count: the step after which the weights were published, the same weights after a skipped step
    assert [record.metrics["training/policy_version"] for record in result.steps] == [0.0, 1.0]

    constant = [{**task, "constant": True} for task in TASKS]
    said = (
        r"no training step of 2 had a trainable sample \(none trained: 12 rollouts \(0 failed\), 12 samples "
        r"selected, 4 groups whose rewards were all equal, 0 calls without token ids\)\. Step 1: every group's"
    )
    with pytest.raises(agl.NothingTrained, match=said):
        train(collector, RecordingBackend(tmp_path / "b"), constant, max_steps=2)


def test_a_resumed_run_whose_steps_since_its_checkpoint_all_tie_warns_not_raises(
    collector: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The chaos run's: a trainer killed near its end resumed for one step whose groups all tied; the run's earlier
    steps trained, so the loop says it and returns (the front door checks the run folder's every step)."""
    train(collector, RecordingBackend(tmp_path), TASKS, max_steps=2, save_every=2)
    constant = [{**task, "constant": True} for task in TASKS]
    result = train(collector, RecordingBackend(tmp_path, resume=True), constant, max_steps=3)
    assert [record.step for record in result.steps] == [3] and result.steps[0].skipped_because
    assert "the 1 step(s) since resuming after step 2 trained nothing" in caplog.text


def test_the_step_line_leaves_out_what_the_backend_does_not_have() -> None:
    line = console_line(3, {"rollout/reward_mean": 0.5, "training/policy_version": float("nan"), "rollout/failed": 0})
    assert line == "step 3: reward 0.500  failed 0"


def test_a_client_nothing_instruments_trains_on_the_gateways_spans_alone(collector: str, tmp_path: Path) -> None:
    """An agent service that is not instrumented (the agent-service example run bare): every call the gateway served
    becomes a sample named by the agent its header gave."""
    backend = RecordingBackend(tmp_path)
    options = agl.TrainingOptions(
        schedule=Schedule(batch_size=2, group_size=3, max_steps=1), sampling=agl.Sampling(max_tokens=16)
    )
    loop = TrainingLoop(backend, options)
    trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=loop, adapter={"agent_match": "^solver$"},
                          progress=False)  # fmt: skip
    (record,) = trainer.fit("tests.training.agents:bare_length_agent", TASKS[:2]).steps
    metrics = record.metrics
    assert metrics["rollout/gateway_calls"] == metrics["rollout/triplets"] == 12  # 2 tasks x 3 rollouts x 2 calls
    assert metrics["rollout/duplicate_calls"] == 0 and record.sample_agents == {"solver": 12}
    assert not record.skipped_because and len(backend.updates[0][1]) == 12


def test_a_time_budget_makes_the_step_that_would_overrun_it_the_last_one(collector: str, tmp_path: Path) -> None:
    backend = RecordingBackend(tmp_path)
    result = train(collector, backend, TASKS * 3, val_every=100, max_steps=6, max_seconds=1e-3)
    assert [record.step for record in result.steps] == [1]  # the first step already used the budget
    assert [record.step for record in result.validations] == [0, 1]  # the last step validates, as the last does
    assert result.steps[0].metrics["training/stopped_by_time_budget"] == 1.0
