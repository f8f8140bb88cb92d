"""Agent Lightning tutorials' code, trained here: the seeds' verl configs taken literally are checked in seconds
(engine, micro-batches, checkpoints, model), the SQL tutorial's LangGraph `LitSQLAgent` runs through `Trainer.dev`,
the ADK tutorial's trainer block runs 2 GRPO steps on CPU, and a run that selects nothing exits non-zero."""

from __future__ import annotations

import copy
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config

import lightning_otel as agl
from lightning_otel.testing import OpenAITestServer
from lightning_otel.testing.tiny_model import save_tiny_model
from lightning_otel.training.verl import config_checks
from lightning_otel.training.verl.config import compose_verl_config
from tests.programs import agent_lightning_shapes as shapes
from tests.programs import agent_lightning_sql as sql

ROOT = Path(__file__).resolve().parents[2]

# The ADK tutorial's verl_config (seed 000), verbatim.
ADK_VERL_CONFIG: dict[str, Any] = {
    "algorithm": {"adv_estimator": "grpo"},
    "data": {"train_batch_size": 32, "max_prompt_length": 4096, "max_response_length": 2048},
    "actor_rollout_ref": {
        "rollout": {"name": "vllm", "n": 4, "multi_turn": {"format": "hermes"}},
        "actor": {"ppo_mini_batch_size": 32, "optim": {"lr": 1e-6}},
        "model": {"path": "meta-llama/Meta-Llama-3-8B-Instruct"},
    },
    "trainer": {"n_gpus_per_node": 1, "val_before_train": True, "test_freq": 32, "save_freq": 64},
}
# What `--ci-fast` sets, to fit 2 steps in CI's minutes on CPU.
SMALL = [
    "trainer.total_training_steps=2",
    "data.train_batch_size=2",
    "actor_rollout_ref.rollout.n=2",
    "data.max_prompt_length=512",
    "data.max_response_length=16",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
]


# --- the seeds' configs, taken literally, fail or adapt in seconds -------------------------------------------------
def test_the_tutorial_config_composes_on_cpu_and_passes_verls_own_validation(
    caplog: pytest.LogCaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="lightning_otel.verl"):
        config = compose_verl_config(copy.deepcopy(ADK_VERL_CONFIG), cpu=True)
    assert config.actor_rollout_ref.rollout.name == "hf"
    assert "rollout.name=vllm needs a GPU" in caplog.text
    # micro-batches were left out: derived from the mini-batch (32 x n=4 on one device -> 8)
    assert config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 8
    assert config.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu == 8
    assert config.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu == 8
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def test_a_gpu_engine_that_is_not_installed_is_an_error_before_anything_starts() -> None:
    started = time.monotonic()
    with pytest.raises(config_checks.ConfigError, match=r"rollout\.name=vllm but vllm is not installed"):
        compose_verl_config(copy.deepcopy(ADK_VERL_CONFIG), cpu=False)
    assert time.monotonic() - started < 10


def test_a_model_path_that_cannot_load_is_an_error_in_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as on a machine without the hub; nothing is fetched in tests
    config = compose_verl_config(copy.deepcopy(ADK_VERL_CONFIG), cpu=True)
    started = time.monotonic()
    with pytest.raises(config_checks.ConfigError, match="Meta-Llama-3-8B-Instruct' cannot be loaded"):
        config_checks.check_model_path(config)
    assert time.monotonic() - started < 30


def test_each_run_checkpoints_to_its_own_folder_and_resumes_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    names = {"trainer": {"project_name": "sql", "experiment_name": "write"}}
    first = compose_verl_config(names, cpu=True).trainer
    second = compose_verl_config(names, cpu=True).trainer
    assert first.resume_mode == second.resume_mode == "disable"
    assert first.default_local_dir != second.default_local_dir
    assert Path(first.default_local_dir).parent == Path("checkpoints/sql/write")
    earlier = Path(first.default_local_dir)  # the first run saved step 3
    earlier.mkdir(parents=True)
    (earlier / config_checks.CHECKPOINT_MARKER).write_text("3")
    with caplog.at_level(logging.WARNING, logger="lightning_otel.verl"):
        resumed = compose_verl_config(names, overrides=["trainer.resume_mode=auto", "trainer.total_training_steps=5"],
                                      cpu=True).trainer  # fmt: skip
    assert resumed.resume_mode == "auto" and resumed.default_local_dir == str(earlier)
    assert "resuming from step 3" in caplog.text and "2 steps remain" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lightning_otel.verl"):
        compose_verl_config(names, overrides=[f"trainer.default_local_dir={earlier}"], cpu=True)
    assert "already holds a checkpoint (step 3)" in caplog.text and "starts from step 0" in caplog.text


# --- the SQL tutorial's LitSQLAgent (LangGraph) through Trainer.dev -------------------------------------------------
def test_sql_tutorial_agent_runs_through_dev_and_write_leaves_check_query_out(tmp_path: Path) -> None:
    database = sql.make_database(str(tmp_path / "concert_singer.sqlite"))
    dev_data = [
        {"task_id": "all", "db_id": database, "question": "How many singers are there?",
         "query": "SELECT count(*) FROM singer"},
        {"task_id": "france", "db_id": database, "question": "How many singers are from France?",
         "query": "SELECT count(*) FROM singer WHERE country = 'France'"},
    ]  # fmt: skip
    with OpenAITestServer(replies=sql.sql_replies) as server:
        with pytest.warns(DeprecationWarning, match="n_runners"):
            trainer = agl.Trainer(
                n_workers=1,
                initial_resources={
                    "main_llm": agl.LLM(
                        endpoint=server.base_url, model="agl-tiny", sampling_parameters={"temperature": 0.7}
                    )
                },
                adapter={"agent_match": "write"},
            )
        result = trainer.dev(sql.LitSQLAgent(max_turns=3, truncate_length=2048), dev_dataset=dev_data)
    (batch,) = result.train
    assert {r["task_id"]: r["reward"] for r in batch.rollouts} == {"all": 1.0, "france": 1.0}
    agents = {r["task_id"]: r["rollout_id"] for r in batch.rollouts}
    selected = {task: [t.agent_name for t in batch.adapted[rid].triplets] for task, rid in agents.items()}
    assert selected == {"all": ["write_query"], "france": ["write_query", "rewrite_query"]}
    france = batch.adapted[agents["france"]].diagnostics
    assert france.agents_seen == ["check_query", "rewrite_query", "write_query"]
    assert france.rollout_agents == ["LitSQLAgent"] and france.unmatched_calls == 2  # the two check_query calls


# --- the ADK tutorial's trainer block: 2 GRPO steps on CPU ---------------------------------------------------------
def test_adk_tutorial_trainer_block_trains_two_grpo_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)  # checkpoints (save_freq=64 saves the last step) land in a per-run folder here
    config = copy.deepcopy(ADK_VERL_CONFIG)
    config["actor_rollout_ref"]["model"]["path"] = str(save_tiny_model(tmp_path / "model"))  # no Llama here
    monkeypatch.setenv("OPENAI_API_BASE", "http://replaced-by-the-gateway/v1")
    monkeypatch.setenv("OPENAI_MODEL", "policy")
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    tasks = [
        {"task_id": f"t{i}", "question": q}
        for i, q in enumerate(["count users", "list orders", "top sales", "new users"])
    ]
    with caplog.at_level(logging.WARNING, logger="lightning_otel.verl"):
        result = shapes.adk_trainer_block(agl.VERL(config, overrides=SMALL, device="cpu")).fit(
            shapes.LitAdkAgent(), train_dataset=tasks
        )
    assert [record.step for record in result.steps] == [1, 2]
    for record in result.steps:
        assert record.skipped_because == [] and record.metrics["training/skipped_step"] == 0
        assert record.sample_agents == {"root_agent": 8}  # 2 tasks x n=2 x 2 calls, all selected by "LitAdkAgent"
    assert "rollout.name=vllm needs a GPU" in caplog.text
    (run,) = (tmp_path / "checkpoints").glob("*/*/run-*")
    assert (run / "global_step_2").is_dir()


def test_a_run_that_selects_nothing_exits_non_zero_with_the_diagnosis(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(f'{{"question": "{q}"}}\n' for q in ["count users", "list orders", "top sales", "new"]))
    command = [
        sys.executable, "-m", "lightning_otel.cli", "train", "--ci-fast", "--algorithm", "verl", "--runners", "1",
        "--agent", "tests.programs.agent_lightning_shapes:LitAdkAgent", "--train", str(tasks),
        "--agent-match", "LitAdk$",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    assert "no training step of 2 had a trainable sample" in done.stderr
    assert "agent_match='LitAdk$' selected none of 8 LLM calls" in done.stderr  # 2 tasks x n=2 x 2
    assert "['root_agent']" in done.stderr and "['LitAdkAgent']" in done.stderr
    assert "trained 0 of 2 steps" in done.stdout and "model:    none written" in done.stdout
