"""VERL end to end on CPU: verl 0.9.1 runs real GRPO steps through our CPU backend (its `cpu` platform and `hf`
rollout replica) while the LangGraph SQL agent (write -> check -> rewrite) runs in runner processes against the
policy gateway; spans go through a real collector; `agent_match="write"` picks the trained calls; the advantages
are per call (`advantage="anchor"`)."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lightning_otel
from lightning_otel.collector.client import Client
from lightning_otel.collector.server import CollectorConfig, EmbeddedCollector
from lightning_otel.testing.tiny_model import save_tiny_model
from tests.helpers import assert_staleness_by_the_spans

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `examples.sql_agent.graph_agent`, as runners (spawned, same sys.path) import it

from examples.sql_agent.graph_agent import sql_graph_rollout  # noqa: E402

TASKS = [{"id": f"q{i}", "question": q} for i, q in enumerate(["orders in 2024", "customers per city", "top sales"])]


def tiny_config(model: Path) -> dict[str, Any]:
    return {
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": 2, "max_prompt_length": 256, "max_response_length": 16, "shuffle": False},
        "actor_rollout_ref": {
            "model": {"path": str(model)},
            "rollout": {"n": 3, "log_prob_micro_batch_size_per_gpu": 4},
            "actor": {"ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_gpu": 4, "optim": {"lr": 1e-3}},
        },
        "trainer": {"total_training_steps": 2, "val_before_train": True, "test_freq": -1, "save_freq": -1},
    }


@pytest.fixture(scope="module")
def training(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[lightning_otel.TrainingResult, list[dict], dict[str, list]]]:
    model = save_tiny_model(tmp_path_factory.mktemp("model"))
    store = tmp_path_factory.mktemp("store") / "collector.sqlite3"
    config = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=f"sqlite:///{store}")
    with EmbeddedCollector(config) as addresses:
        trainer = lightning_otel.Trainer(
            n_runners=2,
            # per-call credit on verl's update (GRPO's own estimator runs in the demo, spider and --ci-fast tests)
            algorithm=lightning_otel.VERL(
                tiny_config(model), lightning_otel.TrainingOptions(advantage="anchor"), device="cpu"
            ),
            adapter={"agent_match": "write"},
            initial_resources={"main_llm": lightning_otel.LLM("http://replaced-by-the-gateway/v1", "policy")},
            collector=addresses.query,
            progress=False,
        )
        result = trainer.fit(sql_graph_rollout, TASKS, TASKS[:1])
        with Client(addresses.query) as client:
            records = client.queued_rollouts(limit=100)
            spans = client.rollouts_spans([r["rollout_id"] for r in records], latest=True)
    yield result, records, spans


def test_two_grpo_steps_train_the_sampled_tokens_and_sync_weights(training: tuple) -> None:
    result, records, _ = training
    assert [record.step for record in result.steps] == [1, 2]
    for record in result.steps:
        metrics = record.metrics
        assert metrics["training/skipped_step"] == 0
        assert metrics["rollout/succeeded"] == metrics["rollout/rollouts"] == 2 * 3  # 2 tasks x n=3
        # The actor's log-probs of the trained tokens equal the sampler's: the rows are exactly what was sampled, and
        # both compute in float32 (verl's default bfloat16 autocast made them differ by up to 0.06 on spider's policy)
        assert metrics["training/rollout_probs_diff_max"] < 1e-5
        assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0
        assert metrics["rollout/groups"] == 2
        # the loop's anchor estimator gave the rows their advantages: the first calls of a task share a state
        assert 0 < metrics["credit/anchor_coverage"] <= 1 and metrics["credit/anchor_groups"] >= 2
    assert all(record["status"] == "succeeded" for record in records) and len(records) == 1 + 12
    # Validation before training: the val task once (val_kwargs.n=1), greedy sampling through the gateway.
    assert [record.step for record in result.validations] == [0]
    assert result.validations[0].metrics["val/succeeded"] == 1 and "val/reward_mean" in result.validations[0].metrics
    # The replica got the actor's weights before step 1 and after each update, and serves the last as version 2 (the
    # weights published after step 2: the loop's count).
    assert result.final["verl/replica_version_min"] == result.final["verl/replica_version_max"] == 2.0


def test_one_version_count_from_the_replica_to_the_span_to_the_queue(training: tuple) -> None:
    """Synchronous steps: step k's rollouts are queued under policy version k-1 and every LLM span of them (the
    client's and the gateway's) names the version that sampled it: the same k-1, the console's `policy v`."""
    result, records, spans = training
    for step, record in enumerate(result.steps, start=1):
        assert record.metrics["training/policy_version"] == step - 1
    train = [r for r in records if r["mode"] == "train"]
    for record in train:
        queued = record["metadata"]["policy_version"]
        sampled = {span["attributes"].get("agl.llm.policy_version") for span in spans[record["rollout_id"]]
                   if "agl.llm.response_token_ids" in span["attributes"]}  # fmt: skip
        assert sampled == {queued} and queued == record["metadata"]["step"] - 1, (record["metadata"], sampled)


def test_only_the_matched_agents_calls_became_samples_once_each(training: tuple) -> None:
    result, records, spans = training
    agent_of: dict[str, str] = {}  # response id -> agent (the client's span names it; the gateway's has the same id)
    copies: dict[str, int] = {}
    train_rollouts = {record["rollout_id"] for record in records if record["mode"] == "train"}
    assert len(train_rollouts) == 12
    for rollout_id in train_rollouts:
        rollout_spans = spans[rollout_id]
        for span in rollout_spans:
            attributes = span["attributes"]
            response_id = attributes.get("gen_ai.response.id")
            if not response_id or "agl.llm.response_token_ids" not in attributes:
                continue
            copies[response_id] = copies.get(response_id, 0) + 1
            if attributes.get("gen_ai.agent.name"):
                agent_of[response_id] = attributes["gen_ai.agent.name"]
    assert set(copies.values()) == {2}, "every call recorded by the instrumented client and by the gateway"
    matched = {rid for rid, agent in agent_of.items() if agent in ("write", "rewrite")}
    assert {agent for agent in agent_of.values()} >= {"write", "check"}
    trained = [rid for record in result.steps for rid in record.sample_response_ids]
    assert len(trained) == len(set(trained)), "a call recorded twice became one sample"
    assert set(trained) == matched
    for record in result.steps:
        assert set(record.sample_agents) <= {"write", "rewrite"}
        assert record.metrics["batch/rows"] == len(record.sample_response_ids)


def test_ci_fast_cli_trains_two_steps_with_per_call_credit_and_runner_actors_on_verls_ray(tmp_path: Path) -> None:
    """Composed: per-call credit, runner actors on verl's Ray, asynchronous steps (verl's CPU replicas serve while
    the actor trains); one verl start for all three."""
    command = [
        sys.executable, "-m", "lightning_otel.cli", "train", "--ci-fast", "--algorithm", "verl",
        "--agent", "examples.sql_agent.graph_agent:sql_graph_rollout",
        "--train", str(ROOT / "examples/sql_agent/tasks.jsonl"), "--agent-match", "write", "--runners", "2",
        "--runners-on", "ray",  # runner actors, started on the Ray verl starts (with its runtime environment)
        "--advantage", "anchor", "--process-rewards", "tool_error=-0.5,truncated=-0.1",  # per-call credit
        "--max-staleness", "1",  # the next step's rollouts run while the actor trains
        "--log-file", str(tmp_path / "train.log"),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "step 1: reward" in done.stdout and "trained 2 of 2 steps" in done.stdout
    assert "anchored" in done.stdout  # the step line's anchor coverage: the loop ran the anchor estimator
    assert "runners: 2 Ray actors on 1 node(s)" in done.stdout  # the rollouts ran in Ray actors
    assert "stale max" in done.stdout  # asynchronous: the step line shows the trained samples' oldest staleness


def test_asynchronous_verl_on_cpu_trains_within_the_staleness_bound_by_the_spans_versions(tmp_path: Path) -> None:
    """`max_staleness=1` on verl's CPU replicas (they serve while the actor trains): no trained sample is more than
    one policy version behind the one trained, by the versions the replica named on the calls' spans, and each step's
    `async/staleness_max` is exactly what the spans say (the count verl's weight sync passes is the loop's)."""
    model = save_tiny_model(tmp_path / "model")
    config = tiny_config(model)
    config["trainer"] = {**config["trainer"], "total_training_steps": 3, "val_before_train": False}
    store = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=f"sqlite:///{tmp_path / 'c.db'}")
    with EmbeddedCollector(store) as addresses:
        trainer = lightning_otel.Trainer(
            n_runners=2,
            algorithm=lightning_otel.VERL(config, lightning_otel.TrainingOptions(max_staleness=1), device="cpu"),
            adapter={"agent_match": "write"},
            initial_resources={"main_llm": lightning_otel.LLM("http://replaced-by-the-gateway/v1", "policy")},
            collector=addresses.query,
            progress=False,
        )
        result = trainer.fit(sql_graph_rollout, TASKS)
        assert [record.step for record in result.steps] == [1, 2, 3]
        assert_staleness_by_the_spans(addresses.query, result.steps, max_staleness=1)
    assert result.final["verl/replica_version_max"] == 3.0
