"""A runner process runs its rollouts with the start-up heap frozen and fewer young collections; the environment
can keep CPython's defaults; the process that imports us is never touched."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pytest

import lightning_otel
from lightning_otel.runner.runner_gc import GC_ENV
from lightning_otel.testing import OpenAITestServer
from lightning_otel.testing.runtime_agents import heap_settled_agent

PROBE = (
    "import gc, json; from lightning_otel.runner.runner_gc import settle_heap; settled = settle_heap(); "
    "print(json.dumps([settled, gc.get_freeze_count(), gc.get_threshold()]))"
)


def probe(setting: str | None) -> subprocess.CompletedProcess[str]:
    environment = dict(os.environ)
    environment.pop(GC_ENV, None)
    if setting is not None:
        environment[GC_ENV] = setting
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=environment, timeout=60)


def test_settling_freezes_the_heap_and_raises_the_thresholds() -> None:
    done = probe(None)
    settled, frozen, thresholds = json.loads(done.stdout)
    assert settled is True
    assert frozen > 1_000  # the interpreter's and our modules' objects
    assert thresholds == [5_000, 20, 20]


def test_default_keeps_cpythons_collector_and_a_typo_is_an_error() -> None:
    settled, frozen, thresholds = json.loads(probe("default").stdout)
    assert (settled, frozen) == (False, 0)
    assert thresholds[0] < 5_000
    typo = probe("off")
    assert typo.returncode != 0
    assert f"{GC_ENV}='off'" in typo.stderr


def fit_reward() -> float:
    with OpenAITestServer() as server:
        trainer = lightning_otel.Trainer(
            n_runners=1,
            algorithm=lightning_otel.Baseline(batch_size=1),
            initial_resources={"main_llm": lightning_otel.LLM(server.base_url, "agl-tiny")},
            progress=False,
        )
        (batch,) = trainer.fit(heap_settled_agent, [{"question": "q"}]).train
    (rollout,) = batch.rollouts
    assert rollout["status"] == "succeeded"
    return batch.adapted[rollout["rollout_id"]].final_reward


def test_the_trainers_runner_runs_rollouts_on_a_settled_heap_and_the_trainer_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(GC_ENV, raising=False)
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    assert fit_reward() == 1.0
    assert (gc.get_threshold(), gc.get_freeze_count()) == (thresholds, frozen)  # only the runner process's own


def test_a_runner_told_to_keep_the_default_collector_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GC_ENV, "default")
    assert fit_reward() == 0.0
