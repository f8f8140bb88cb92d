"""`Tinker` end to end on CPU: runner processes call the policy gateway in front of the local engine's sampler, the
spans go to a real collector, samples become datums, the engine trains and the next step samples the new weights
(whose version every LLM span and every rollout carries); a training that cannot learn says so; a training with no
runner says so; runners started on their own stop when the training ends."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

import lightning_otel as agl
from lightning_otel import semconv
from lightning_otel.collector import Client
from lightning_otel.runtime.training_run import NoRunner, RunSettings, TrainingRun
from tests.helpers import assert_staleness_by_the_spans

ROOT = Path(__file__).resolve().parents[2]
TASKS = [{"task_id": f"t{i}", "question": f"Question number {i}?"} for i in range(4)]


def tinker(model_dir: Path, log_dir: Path | None = None, *, schedule: dict | None = None,
           engine_args: dict | None = None, **options) -> agl.Tinker:  # fmt: skip
    engine = agl.LocalEngine(model_dir, rank=4, seed=0, log_dir=log_dir)
    settings = agl.TrainingOptions(
        schedule=agl.Schedule(**{"batch_size": 2, "group_size": 4, "val_every": 5, **(schedule or {})}),
        sampling=agl.Sampling(max_tokens=8), trackers=agl.Trackers(logger=()), **options,
    )  # fmt: skip
    return agl.Tinker(engine, settings, learning_rate=1e-2, **(engine_args or {}))


def test_tinker_trains_on_traces_and_serves_each_new_sampler(
    tiny_model_dir: Path, collector: str, tmp_path: Path
) -> None:
    steps: list[dict[str, float]] = []
    algorithm = tinker(tiny_model_dir, tmp_path / "run", schedule={"max_steps": 3, "val_every": 2, "save_every": 2},
                       on_step=lambda step, m: steps.append(m))  # fmt: skip
    trainer = agl.Trainer(n_runners=2, collector=collector, algorithm=algorithm)
    result = trainer.fit("tests.tinker.agents:short_answer_agent", TASKS, TASKS[:2])

    metrics = [record.metrics for record in result.steps]
    assert [step["train/datums"] for step in metrics] == [8.0, 8.0, 8.0]  # 2 tasks x 4 rollouts, one call each
    assert [step["training/policy_version"] for step in metrics] == [0.0, 1.0, 2.0]
    assert all(step["rollout/succeeded"] == 8 and step["train/constant_groups"] == 0 for step in metrics)
    assert [step for step, _ in result.validation] == [0, 2, 3]
    assert steps == metrics
    # checkpoints every 2 steps and at the end: a PEFT adapter on the base model, and the optimizer to resume
    assert [Path(path).name for path in result.checkpoints] == ["step-2", "step-3"]
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), result.checkpoints[-1])
    assert (Path(result.checkpoints[-1]) / "optimizer.pt").exists()

    client = Client(collector)
    train = [r for r in client.queued_rollouts(limit=100) if r["mode"] == "train"]
    assert len(train) == 24 and all(record["runner_id"] for record in train)
    spans = client.rollouts_spans([r["rollout_id"] for r in train], latest=True)
    for record in train:
        calls = [s for s in spans[record["rollout_id"]] if semconv.AGL_RESPONSE_TOKEN_IDS in s["attributes"]]
        served = [s["attributes"].get(semconv.AGL_POLICY_VERSION) for s in calls]
        # every LLM span (the agent's client and the gateway both record the call) says which sampler answered;
        # the queue says which policy the rollout was queued under: the same, as steps are synchronous
        assert len(calls) == 2 and set(served) == {record["metadata"]["policy_version"]}, (record, served)


def test_a_reward_that_never_varies_trains_nothing_and_says_so(tiny_model_dir: Path, collector: str) -> None:
    trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=tinker(tiny_model_dir, schedule={"max_steps": 2}))
    said = r"none trained: 16 rollouts \(0 failed\), 16 samples selected, 4 groups whose rewards were all equal"
    with pytest.raises(agl.NothingTrained, match=said):
        trainer.fit("tests.tinker.agents:constant_agent", TASKS[:2])


def test_checkpoints_need_a_folder_before_any_step(tiny_model_dir: Path, collector: str) -> None:
    algorithm = tinker(tiny_model_dir, schedule={"save_every": 1})
    trainer = agl.Trainer(n_runners=0, collector=collector, algorithm=algorithm)
    with pytest.raises(ValueError, match="save_every needs an engine with a log_dir"):
        trainer.fit("tests.tinker.agents:constant_agent", TASKS[:2])


def test_no_runner_is_said_after_a_delay_and_is_an_error_after_the_timeout(
    collector: str, caplog: pytest.LogCaptureFixture
) -> None:
    with Client(collector) as client:
        settings = RunSettings(no_runner_warning_s=0.5, no_runner_timeout_s=2.0)
        run = TrainingRun(client, agl.TraceToTriplet(), settings, on_progress=lambda *_: None)
        batch = run.submit(TASKS[:1], n=2)
        with caplog.at_level(logging.WARNING), pytest.raises(NoRunner, match="no runner claimed any of the 2"):
            run.collect(batch)
        assert "no runner has claimed any of the 2 rollouts" in caplog.text
        assert {r["status"] for r in client.queued_rollouts()} == {"cancelled"}  # nothing left behind


def test_a_runner_started_on_its_own_stops_when_the_training_ends(collector: str) -> None:
    runner = subprocess.Popen(
        [sys.executable, "-m", "lightning_otel.cli", "runner", "--collector", collector, "--runner-id", "elsewhere",
         "--agent", "tests.tinker.agents:constant_agent"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        from lightning_otel.testing import OpenAITestServer

        with OpenAITestServer() as server:
            trainer = agl.Trainer(n_runners=0, collector=collector, algorithm=agl.Baseline(batch_size=2),
                                  initial_resources={"main_llm": agl.LLM(server.base_url, "agl-tiny")})  # fmt: skip
            result = trainer.fit("tests.tinker.agents:constant_agent", TASKS[:2])
        assert set(result.train[0].runners().values()) == {"elsewhere"}  # batch results say who ran each rollout
        started = time.monotonic()
        output, _ = runner.communicate(timeout=40)  # no signal: it stops on the training's published end
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 0, output
    assert "the run this runner served" in output and "ended (finished): stopping" in output
    assert time.monotonic() - started < 30


def test_asynchronous_tinker_trains_stale_samples_within_the_bound_and_measures_their_gap(
    tiny_model_dir: Path, collector: str
) -> None:
    """`max_staleness=1`: the next step's groups run while the engine updates; samples one version behind are trained
    with truncated importance sampling (`tis_cap`), and the trainer-vs-sampler logprob gap is measured per
    staleness."""
    algorithm = tinker(tiny_model_dir, schedule={"max_steps": 3, "val_every": 0}, max_staleness=1,
                       engine_args={"tis_cap": 2.0})  # fmt: skip
    assert algorithm.loss_fn_config == {"tis_cap": 2.0}
    trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=algorithm, progress=False)
    result = trainer.fit("tests.tinker.agents:short_answer_agent", TASKS)
    metrics = [record.metrics for record in result.steps]
    assert len(metrics) == 3 and all(step["train/datums"] == 8.0 for step in metrics)
    # the bound holds by the versions the spans name, and the metric is what the spans say
    assert_staleness_by_the_spans(collector, result.steps, max_staleness=1)
    gaps = {key: value for step in metrics for key, value in step.items() if "logprob_gap" in key}
    assert "async/logprob_gap_staleness_0" in gaps or "async/logprob_gap_staleness_1" in gaps
    assert all(value >= 0.0 for value in gaps.values())
    # step 1 trains the first policy's own samples: the trainer recomputes the sampler's logprobs (a tiny gap)
    assert metrics[0].get("async/logprob_gap_staleness_0", 0.0) < 0.05


def test_tis_cap_needs_importance_sampling(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"tis_cap=2\.0 needs loss_fn='importance_sampling'"):
        tinker(tiny_model_dir, engine_args={"loss_fn": "ppo", "tis_cap": 2.0})
