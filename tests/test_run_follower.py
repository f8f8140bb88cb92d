"""A runner serves one run at a time: started by hand it follows the run of the oldest rollout waiting, runs none of
another run's meanwhile, and when that run ends takes the next (`--keep-serving`) or stops; started for a run
(`--run`, the Trainer's runners) it stops when that run ends, a lapsed lease included, and says so."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning_otel
from lightning_otel.collector.client import Client
from lightning_otel.collector.server import EmbeddedCollector
from lightning_otel.runner.runner import Runner
from lightning_otel.runner.runner_options import RunnerOptions

ROOT = Path(__file__).resolve().parents[1]


@lightning_otel.rollout
async def quick(task: dict[str, Any]) -> float:
    return 1.0


def status_of(client: Client, rollout_id: str) -> str:
    return client.rollout(rollout_id)["status"]


async def wait_for(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


def test_a_runner_started_by_hand_follows_one_run_then_takes_the_next(tmp_path: Path) -> None:
    with EmbeddedCollector.on_sqlite_file(tmp_path / "collector.sqlite3") as addresses:
        client = Client(addresses.query)
        for run_id in ("run-a", "run-b"):
            client.start_run(run_id)
        (first,) = client.enqueue([{"input": {}, "run_id": "run-a"}])
        options = RunnerOptions(max_concurrency=1, claim_wait_s=0.2, stop_when_training_ends=False)
        runner = Runner(quick, addresses.query, options, flush=lambda: None)

        async def scenario() -> None:
            running = asyncio.create_task(runner.run())
            await wait_for(lambda: status_of(client, first["rollout_id"]) == "succeeded")
            assert runner.follower.serving == "run-a"
            (other,) = client.enqueue([{"input": {}, "run_id": "run-b"}])
            await asyncio.sleep(1.0)
            assert (
                status_of(client, other["rollout_id"]) == "queuing"
            )  # another run's: not this runner's while run-a lives
            client.end_run("run-a")
            await wait_for(lambda: status_of(client, other["rollout_id"]) == "succeeded")
            assert runner.follower.serving == "run-b"
            runner.stop()
            await running

        asyncio.run(scenario())


def test_a_runner_started_for_a_run_stops_when_its_lease_lapses(tmp_path: Path) -> None:
    with EmbeddedCollector.on_sqlite_file(tmp_path / "collector.sqlite3") as addresses:
        client = Client(addresses.query)
        client.start_run("run-of-a-dead-trainer", lease_s=2.0)  # nobody renews it
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "lightning_otel.cli", "runner", "--collector", addresses.query,
             "--agent", "tests.test_run_follower:quick", "--run", "run-of-a-dead-trainer"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert client.run("run-of-a-dead-trainer")["state"] == "lost"
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "the run this runner served, run-of-a-dead-trainer, ended (lost): stopping" in said
    assert time.monotonic() - began < 60  # the lease (2 s) and one claim's wait (10 s), not forever
