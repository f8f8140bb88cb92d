"""Faults are ridden out, not raised: the collector client retries an unreachable or unavailable collector with
backoff (saying when it starts and when it recovers) up to its bound; a training on an external collector finishes
every step through a SIGKILL and a restart 6 s later, and through its PostgreSQL stopped for 5 s; a training owns its
queued rollouts (an earlier, dead training's are cancelled, not run)."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import lightning_otel
from lightning_otel.collector.client import Client, CollectorError
from lightning_otel.testing import OpenAITestServer
from lightning_otel.testing.runtime_agents import four_calls
from tests.collector.helpers import CollectorProcess
from tests.helpers import free_port


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[CollectorProcess]:
    process = CollectorProcess(tmp_path / "store.sqlite3").start()
    yield process
    if process.process is not None and process.process.poll() is None:
        process.signal(signal.SIGTERM)


def restart_later(
    collector: CollectorProcess, delay_s: float, outage: Callable[[], None] | None = None
) -> threading.Thread:
    """SIGKILL the collector now (or run `outage`), start it again on the same ports and store `delay_s` later."""

    def run() -> None:
        if outage is None:
            collector.signal(signal.SIGKILL)
            time.sleep(delay_s)
            collector.start()
        else:
            outage()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_client_rides_out_a_restart_and_says_when_it_starts_and_recovers(collector, caplog) -> None:
    client = Client(collector.query_url)
    assert client.queue_stats()["queuing"] == 0
    restarter = restart_later(collector, 1.5)
    time.sleep(0.3)  # the collector is down now
    with caplog.at_level(logging.WARNING, logger="lightning_otel.collector.client"):
        began = time.monotonic()
        assert client.queue_stats()["queuing"] == 0  # answered by the restarted collector
        waited = time.monotonic() - began
    restarter.join()
    assert waited >= 1.0
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 2, said  # one line when it starts, one when it recovers
    assert "unreachable" in said[0] and "retrying for up to 300 s" in said[0]
    assert "answers again after" in said[1]


def test_past_its_bound_the_client_fails_with_one_clear_line() -> None:
    client = Client(f"http://127.0.0.1:{free_port()}", retry_for_s=1.0)
    began = time.monotonic()
    with pytest.raises(CollectorError, match=r"unreachable for 1 s \(\d+ tries; the bound is 1 s\)"):
        client.queue_stats()
    assert 0.9 <= time.monotonic() - began < 5
    with pytest.raises(CollectorError, match="unreachable: ConnectError"):  # no retries asked for: at once
        Client(client.url, retry_for_s=0).queue_stats()


class _Scripted(BaseHTTPRequestHandler):
    """Answers each request with the next (status, body) of `script`; then 200."""

    script: list[tuple[int, bytes]] = []
    seen: list[str] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        status, body = self.script.pop(0) if self.script else (200, b'{"counts": {"queuing": 7}}')
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        if status == 503:
            self.send_header("retry-after", "0")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[type[_Scripted]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Scripted.script, _Scripted.seen = [], []
    _Scripted.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield _Scripted
    server.shutdown()


def test_a_503_is_retried_and_a_4xx_is_not(scripted) -> None:
    scripted.script = [(503, b"store unavailable"), (503, b"store unavailable")]
    assert Client(scripted.url).queue_stats() == {"queuing": 7}  # type: ignore[attr-defined]
    assert len(scripted.seen) == 3
    scripted.script = [(400, b"bad query")]
    with pytest.raises(CollectorError, match="HTTP 400 bad query"):
        Client(scripted.url).queue_stats()  # type: ignore[attr-defined]
    assert len(scripted.seen) == 4  # once


def test_a_repeated_enqueue_returns_the_rollouts_the_first_one_queued(collector) -> None:
    client = Client(collector.query_url)
    spec = {"rollout_id": "ro-fixed-1", "input": {"q": 1}, "group_id": "g"}
    (first,) = client.enqueue([spec])
    body = {"rollouts": [spec], "if_exists": "return"}
    again = client._request("POST", "/v1/queue/enqueue", "rollouts", json=body)  # what a retry sends
    assert [r["rollout_id"] for r in again] == ["ro-fixed-1"] and again[0]["created_ns"] == first["created_ns"]
    assert client.queue_stats()["queuing"] == 1  # queued once
    with pytest.raises(CollectorError, match="already exist"):  # without if_exists it is still an error
        client._request("POST", "/v1/queue/enqueue", "rollouts", json={"rollouts": [spec]})


def slow_training(collector: CollectorProcess, server: OpenAITestServer, epochs: int) -> lightning_otel.Trainer:
    return lightning_otel.Trainer(
        n_runners=1,
        algorithm=lightning_otel.Baseline(batch_size=4, n_rollouts=2, n_epochs=epochs),
        initial_resources={"main_llm": lightning_otel.LLM(server.base_url, "agl-tiny")},
        collector=collector.query_url,
        progress=False,
        settings=lightning_otel.RunSettings(span_wait_s=20),
    )


def first_rollout_done(collector: CollectorProcess, timeout: float = 120) -> None:
    client, deadline = Client(collector.query_url), time.monotonic() + timeout
    while client.queue_stats()["succeeded"] < 1:
        assert time.monotonic() < deadline, "no rollout finished"
        time.sleep(0.2)


def assert_every_step_complete(result, epochs: int) -> None:
    assert len(result.train) == epochs
    for batch in result.train:
        statuses = [record["status"] for record in batch.rollouts]
        assert statuses == ["succeeded"] * 8, statuses
        assert not batch.incomplete and len(batch.spans) == 8  # every rollout read with its spans
        assert all(len(adapted.triplets) == 4 for adapted in batch.adapted.values())  # four calls, each a sample


def test_a_training_finishes_every_step_through_a_collector_sigkill_and_restart_6_s_later(collector, caplog) -> None:
    with OpenAITestServer(replies=lambda body: "ok", latency_s=0.15) as server, caplog.at_level(logging.WARNING):
        trainer = slow_training(collector, server, epochs=4)
        outage = threading.Thread(target=lambda: (first_rollout_done(collector), restart_later(collector, 6.0).join()))
        outage.start()
        result = trainer.fit(four_calls, [{"question": f"q{i}"} for i in range(4)])
        outage.join()
    assert_every_step_complete(result, epochs=4)
    said = " | ".join(record.getMessage() for record in caplog.records)
    assert "unreachable" in said and "answers again after" in said


def test_a_training_rides_out_its_postgresql_stopped_for_5_s(tmp_path: Path, postgres_cluster, caplog) -> None:
    url = postgres_cluster.create_database(f"faults_{int(time.time())}")
    collector = CollectorProcess(url).start()
    try:

        def database_outage() -> None:
            first_rollout_done(collector)
            postgres_cluster.stop()
            time.sleep(5.0)
            postgres_cluster.start_again()

        with OpenAITestServer(replies=lambda body: "ok", latency_s=0.15) as server, caplog.at_level(logging.WARNING):
            outage = threading.Thread(target=database_outage)
            outage.start()
            result = slow_training(collector, server, epochs=4).fit(
                four_calls, [{"question": f"q{i}"} for i in range(4)]
            )
            outage.join()
    finally:
        collector.signal(signal.SIGTERM)
    assert_every_step_complete(result, epochs=4)
    # the outage is said in lines that name it, not in tracebacks, by the collector and by the trainer
    logged = "".join(collector.output)
    assert "Traceback" not in logged, logged[-3000:]
    said = " | ".join(record.getMessage() for record in caplog.records)
    assert "_Unavailable" not in said and "Traceback" not in said, said


def test_a_training_cancels_what_a_dead_training_left_queued_and_runs_none_of_it(collector) -> None:
    client = Client(collector.query_url)
    client.start_run("run-that-died", lease_s=1.0)  # a training that then died: nobody renews its lease
    left = client.enqueue([{"input": {"question": "left"}, "run_id": "run-that-died"} for _ in range(5)])
    outside = client.enqueue([{"input": {"question": "outside any run"}}])
    time.sleep(1.5)
    with OpenAITestServer(replies=lambda body: "ok") as server:
        result = slow_training(collector, server, epochs=1).fit(four_calls, [{"question": f"q{i}"} for i in range(4)])
    assert_every_step_complete(result, epochs=1)
    for record in left:
        after = client.rollout(record["rollout_id"])
        assert after["status"] == "cancelled" and after["attempts"] == 0  # never run
        assert "lease lapsed" in after["error"]
    assert client.run("run-that-died")["state"] == "lost"
    # a rollout queued outside any run is no training's: left as it is, and the training's runners did not run it
    assert client.rollout(outside[0]["rollout_id"])["status"] == "queuing"
