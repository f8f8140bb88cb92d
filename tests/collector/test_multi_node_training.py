"""Past one machine, tested as it fails: a Ray cluster of a head and a second node (`ray.cluster_utils.Cluster`, as
Ray's own tests build one), two `agl-otel-collector` processes on one throwaway PostgreSQL, runner actors on both
nodes (each exporting to its node's collector), a training loop of a few steps. Mid-step one collector is SIGKILLed
(its supervisor starts it again 3 s later) and one runner actor's process is SIGKILLed: every step completes and
trains, the lost rollout is retried, Ray restarts the actor and it serves again, every span is stored once, and the
trainer says what happened."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

import lightning_otel as agl
from lightning_otel.collector import Client
from lightning_otel.training.loop.loop import TrainingLoop
from lightning_otel.training.loop.schedule import Schedule
from tests.collector.helpers import CollectorProcess
from tests.helpers import run_benchmark_quick
from tests.training.backends import RecordingBackend

ray = pytest.importorskip("ray")  # the trainer extra's verl brings it; the openai3 lane has no Ray
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util.state import list_actors  # noqa: E402

REPO = str(Path(__file__).resolve().parents[2])
TASKS = [{"task_id": f"t{i}", "question": f"Question {i}?"} for i in range(4)]


@pytest.fixture
def two_node_cluster():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    second = cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address, include_dashboard=False)
    try:
        yield cluster.address, cluster.head_node.node_id, second.node_id
    finally:
        ray.shutdown()
        cluster.shutdown()


def runner_actors(address: str) -> list:
    alive = [("class_name", "=", "RunnerActor"), ("state", "=", "ALIVE")]
    return list_actors(address=address, filters=alive, detail=True)


def test_a_training_on_two_ray_nodes_and_two_collectors_rides_out_a_collector_and_a_runner_killed_mid_step(
    two_node_cluster, postgres_cluster, tmp_path: Path, caplog
) -> None:
    address, head, second = two_node_cluster
    store = postgres_cluster.create_database(f"multi_{uuid.uuid4().hex[:10]}")
    first_collector, second_collector = CollectorProcess(store).start(), CollectorProcess(store).start()
    client = Client(first_collector.query_url)
    killed: dict[str, object] = {}

    def faults() -> None:
        """In step 2, with rollouts running: SIGKILL the second node's collector and the head's runner actor."""
        deadline = time.monotonic() + 180
        while not (client.queue_stats()["succeeded"] >= 8 and client.queue_stats()["running"] >= 2):
            assert time.monotonic() < deadline, "step 2 never ran"
            time.sleep(0.1)
        (victim,) = [actor for actor in runner_actors(address) if actor.node_id == head]
        killed["running"] = client.queue_stats()["running"]
        second_collector.signal(signal.SIGKILL)
        os.kill(victim.pid, signal.SIGKILL)
        killed["actor"] = victim.actor_id
        time.sleep(3.0)
        second_collector.start()  # as its supervisor would (systemd Restart=always)

    runners = agl.RayRunners(
        n=2,
        num_cpus=1,
        collectors={head: first_collector.query_url, second: second_collector.query_url},
        runtime_env={"env_vars": {"PYTHONPATH": REPO}},  # the agent's module, as a user's working_dir would give
    )
    options = agl.TrainingOptions(
        schedule=Schedule(batch_size=4, group_size=2, max_steps=4), sampling=agl.Sampling(max_tokens=16)
    )
    loop = TrainingLoop(RecordingBackend(tmp_path, latency_s=0.5), options)
    trainer = agl.Trainer(
        runners=runners,
        collector=first_collector.query_url,
        algorithm=loop,
        progress=False,
        runner_options=agl.RunnerOptions(max_concurrency=2),
    )
    try:
        with caplog.at_level(logging.WARNING):
            spread = threading.Thread(target=faults, daemon=True)
            spread.start()
            placed: list = []
            watcher = threading.Thread(target=lambda: placed.extend(_wait_for_actors(address, 2)), daemon=True)
            watcher.start()
            result = trainer.fit("tests.training.agents:length_agent", TASKS)
            spread.join(10)
            watcher.join(10)
    finally:
        for collector in (first_collector, second_collector):
            collector.signal(signal.SIGTERM)

    assert {actor.node_id for actor in placed} == {head, second}  # one runner actor on each node
    assert "actor" in killed, "the faults never ran"
    assert [record.step for record in result.steps] == [1, 2, 3, 4]
    for record in result.steps:  # every step completed and trained
        assert record.metrics["rollout/succeeded"] == 8 and record.metrics["rollout/failed"] == 0
        assert record.metrics["training/samples"] == 8 and record.metrics["training/skipped_step"] == 0
    assert sum(record.metrics["rollout/retried"] for record in result.steps) >= 1  # the lost rollout ran again
    said = " | ".join(record.getMessage() for record in caplog.records)
    assert "Ray actor" in said and "died" in said and "will retry" in said, said
    assert "is back" in said, said  # Ray restarted the killed actor and it served again under a new runner id

    import psycopg

    with psycopg.connect(store) as connection:
        calls = connection.execute(
            "SELECT s.rollout_id, s.attempt_id, count(*) FROM agl_spans s JOIN agl_attempts a "
            "ON a.rollout_id = s.rollout_id AND a.attempt_id = s.attempt_id "
            "WHERE s.operation = 'chat' AND a.status = 'succeeded' GROUP BY 1, 2"
        ).fetchall()
    # one LLM call per succeeded attempt, recorded by the agent's client and by the policy gateway, each span stored
    # once (a batch the exporter sent again is not stored twice), for each of the 32 rollouts (the killed actor's
    # attempts failed: their client spans died with it, the gateway's did not)
    assert {count for _, _, count in calls} == {2}
    assert len({rollout for rollout, _, _ in calls}) == 32


def _wait_for_actors(address: str, n: int, timeout: float = 120) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        actors = runner_actors(address)
        if len(actors) >= n:
            return actors
        time.sleep(0.5)
    return []


def test_the_scale_out_benchmarks_quick_mode_runs_and_prints_its_comparison() -> None:
    """Here, not in tests/test_benchmark_quick_modes.py: its Trainer starts a Ray of its own, which must not meet the
    cluster above (one file runs on one worker, one test at a time)."""
    run_benchmark_quick(Path(REPO), "scale_out", ("Ray actors", "local processes", "ratio two collectors / one"),
                        timeout=300)  # fmt: skip


def test_the_chaos_runs_quick_mode_holds_every_check() -> None:
    """`python -m benchmarks.chaos --quick`: two minutes of one training on PostgreSQL with two collectors, a Ray runner
    and a local runner while the nemesis kills and freezes them, the database, the policy's connections and the
    trainer; every check of its checker holds (nothing lost or trained twice), the fault-free run's too. Here for the
    same reason as scale_out's: its Ray head is its own, and this file's worker runs one Ray at a time."""
    expected = ("no rollout trained in two steps", "every trained sample from a succeeded attempt",
                "every check held")  # fmt: skip
    run_benchmark_quick(Path(REPO), "chaos", expected, timeout=900)
