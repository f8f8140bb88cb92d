"""One `agl-otel-collector` shared by several sessions at once: a training, a dry run beside it and a second
training each finish with their own rollouts, run by their own runners against their own policy, on SQLite and
PostgreSQL; a SIGKILLed trainer's runners end with it and the next training's rollouts are all its own runners'."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lightning_otel.collector.client import Client
from lightning_otel.testing import OpenAITestServer
from lightning_otel.testing.runtime_agents import four_calls
from tests.collector.helpers import CollectorProcess
from tests.collector.test_faults import slow_training

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def collector(store_url: str) -> Any:
    process = CollectorProcess(store_url).start()
    yield process
    if process.process is not None and process.process.poll() is None:
        process.signal(signal.SIGTERM)


def in_thread(work: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = work()
        except BaseException as exc:  # the test reads it
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def own_rollouts(batches: list[Any]) -> tuple[set[str], set[str], list[dict[str, Any]]]:
    """(the runs, the runners, the records) of a session's batches."""
    records = [record for batch in batches for record in batch.rollouts]
    return {r["run_id"] for r in records}, {r["runner_id"] for r in records}, records


def test_a_training_a_dry_run_and_a_second_training_share_one_collector(collector: CollectorProcess) -> None:
    tasks = [{"question": f"q{i}"} for i in range(4)]
    slow = 0.05  # each call: the sessions overlap for seconds
    with (
        OpenAITestServer(latency_s=slow) as first_server,
        OpenAITestServer(latency_s=slow) as dry_server,
        OpenAITestServer(latency_s=slow) as second_server,
    ):
        first, first_box = in_thread(lambda: slow_training(collector, first_server, epochs=3).fit(four_calls, tasks))
        client, deadline = Client(collector.query_url), time.monotonic() + 120
        while client.queue_stats()["succeeded"] < 1:  # the first training is under way
            assert time.monotonic() < deadline and first.is_alive(), first_box
            time.sleep(0.1)
        dry, dry_box = in_thread(
            lambda: slow_training(collector, dry_server, epochs=1).dev(four_calls, tasks, print_spans=False)
        )
        second, second_box = in_thread(lambda: slow_training(collector, second_server, epochs=1).fit(four_calls, tasks))
        for thread in (first, dry, second):
            thread.join(300)
    for box in (first_box, dry_box, second_box):
        assert "error" not in box, box.get("error")
    sessions = {
        "first": (first_box["result"].train, first_server, 3 * 8),  # 3 epochs of 4 tasks x 2
        "dry": (dry_box["result"].train, dry_server, 4),  # each task once
        "second": (second_box["result"].train, second_server, 8),
    }
    runs, runners = {}, {}
    for name, (batches, server, rollouts) in sessions.items():
        run_ids, runner_ids, records = own_rollouts(batches)
        assert [r["status"] for r in records] == ["succeeded"] * rollouts, (name, records)
        assert len(run_ids) == 1, (name, run_ids)
        runs[name], runners[name] = run_ids.pop(), runner_ids
        # every call went to this session's own policy, and every sample is one of its calls
        assert len(server.served) == 4 * rollouts, name
        for batch in batches:
            for triplet in batch.triplets():
                (response_id,) = triplet.response_ids
                assert triplet.response_token_ids == server.served[response_id].response_token_ids[0], name
    assert len(set(runs.values())) == 3
    assert not (runners["first"] & runners["dry"]) and not (runners["first"] & runners["second"])
    with Client(collector.query_url) as client:
        assert client.queue_stats()["cancelled"] == 0  # no session cancelled another's rollouts
        assert {run["run_id"]: run["state"] for run in client.runs()} == dict.fromkeys(runs.values(), "finished")


TRAINER_SCRIPT = """
import sys
import lightning_otel
from lightning_otel.testing.runtime_agents import sleeping_agent

if __name__ == "__main__":
    trainer = lightning_otel.Trainer(
        n_runners=2,
        collector=sys.argv[1],
        progress=False,
        runner_options=lightning_otel.RunnerOptions(max_concurrency=1),
    )
    trainer.fit(sleeping_agent, [{"sleep_s": 600} for _ in range(8)])
"""


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.update(int(child) for child in text)
    return found


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_a_sigkilled_trainers_runners_end_with_it(collector: CollectorProcess, tmp_path: Path) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER_SCRIPT)
    trainer = subprocess.Popen([sys.executable, str(script), collector.query_url], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    client, deadline = Client(collector.query_url), time.monotonic() + 120
    try:
        while client.queue_stats()["running"] < 2:  # both runners hold a rollout whose agent hangs
            assert time.monotonic() < deadline and trainer.poll() is None
            time.sleep(0.2)
        runners = {
            pid for pid in children_of(trainer.pid) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        }
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(10)
    assert len(runners) == 2
    ended = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in runners):
        assert time.monotonic() < ended, f"runner processes {runners} outlived their trainer"
        time.sleep(0.1)
    # the next training on the collector: its rollouts are run by its own runners only
    with OpenAITestServer() as server:
        result = slow_training(collector, server, epochs=1).fit(four_calls, [{"question": f"q{i}"} for i in range(4)])
    run_ids, runner_ids, records = own_rollouts(result.train)
    assert [r["status"] for r in records] == ["succeeded"] * 8
    assert len(run_ids) == 1 and len(runner_ids) == 1


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


EMBEDDED_TRAINER_SCRIPT = """
import sys
import lightning_otel
from lightning_otel.collector import CollectorConfig
from lightning_otel.testing.runtime_agents import sleeping_agent

if __name__ == "__main__":
    trainer = lightning_otel.Trainer(n_runners=1, collector=CollectorConfig.embedded(query_port=int(sys.argv[1])),
                                     progress=False)
    trainer.fit(sleeping_agent, [{"sleep_s": 600}])
"""


def test_a_runner_whose_trainer_and_collector_died_ends_at_once_in_one_line(tmp_path: Path) -> None:
    """Issue 72's sixth defect: a runner whose agent hangs took 13-40 s to end after its trainer (and the trainer's
    embedded collector) was SIGKILLed, printing 8 warnings while it retried reports and spans with nowhere to go.
    It ends within a few seconds and says why in one line (the SDK's word on a batch already under way aside)."""
    from lightning_otel.testing.ports import free_port

    script, log, port = tmp_path / "trainer.py", tmp_path / "trainer.log", free_port()
    script.write_text(EMBEDDED_TRAINER_SCRIPT)
    with log.open("w") as out:
        trainer = subprocess.Popen([sys.executable, str(script), str(port)], cwd=ROOT, stdout=out, stderr=out,
                                   env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    deadline = time.monotonic() + 120
    try:
        while True:  # the runner holds the rollout whose agent hangs
            assert time.monotonic() < deadline and trainer.poll() is None, log.read_text()[-2000:]
            try:
                if Client(f"http://127.0.0.1:{port}", retry_for_s=0).queue_stats()["running"] == 1:
                    break
            except Exception:
                pass
            time.sleep(0.2)
        (runner,) = {
            pid for pid in children_of(trainer.pid) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        }
        before = len(log.read_text().splitlines())
    finally:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(10)
    killed = time.monotonic()
    while Path(f"/proc/{runner}").exists() and "Z" not in _state(runner):
        assert time.monotonic() - killed < 5, "the runner outlived its trainer by 5 s"
        time.sleep(0.05)
    time.sleep(0.5)  # what it printed on its way out is in the log
    said = [line for line in log.read_text().splitlines()[before:] if "opentelemetry.exporter" not in line]
    assert len(said) <= 1 and all("the trainer is gone" in line for line in said), said
