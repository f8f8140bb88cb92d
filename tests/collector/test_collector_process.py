"""The `agl-otel-collector` process: ready lines, SIGTERM drain, env configuration, `link`, and durability under
SIGKILL (every acknowledged span is found exactly once after a restart and the clients' resends)."""

from __future__ import annotations

import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from lightning_otel.testing.otlp_factory import make_request, make_span
from tests.collector.helpers import PB, CollectorProcess


def test_ready_lines_env_configuration_and_sigterm(tmp_path: Path) -> None:
    collector = CollectorProcess(tmp_path / "c.sqlite3", env={"AGL_COLLECTOR_AUTH_TOKEN": "envtok"}).start()
    ready = "".join(collector.output)
    assert f"OTLP/HTTP  http://127.0.0.1:{collector.http_port}/v1/traces" in ready
    assert f"OTLP/gRPC  127.0.0.1:{collector.grpc_port}" in ready
    body = make_request([make_span(1, 1, rollout="rp")]).SerializeToString()
    assert httpx.post(collector.otlp_url, content=body, headers=PB).status_code == 401  # token from the env
    auth = {"authorization": "Bearer envtok"}
    assert httpx.post(collector.otlp_url, content=body, headers={**PB, **auth}).status_code == 200
    link = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_otel.collector",
            "link",
            "rp",
            "--query-url",
            collector.query_url,
            "--jaeger-ui-url",
            "http://jaeger.local:16686/",
            "--auth-token",
            "envtok",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert link.returncode == 0, link.stderr
    assert link.stdout.strip() == f"http://jaeger.local:16686/trace/{(1).to_bytes(16, 'big').hex()}"
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_otel.collector",
            "link",
            "nope",
            "--query-url",
            collector.query_url,
            "--auth-token",
            "envtok",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1 and "no spans stored" in missing.stderr
    assert collector.signal(signal.SIGTERM) == 0
    assert "stopped" in "".join(collector.output)


def _run_collector(store: str, http_port: int) -> subprocess.CompletedProcess[str]:
    """Run the collector with a configuration it must refuse; returns the finished process."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_otel.collector",
            "--store",
            store,
            "--http-port",
            str(http_port),
            "--grpc-port",
            "-1",
            "--query-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = _run_collector(f"sqlite:///{tmp_path}/x.sqlite3", busy.getsockname()[1])
    assert result.returncode != 0
    assert "agl-otel-collector:" in result.stderr and "in use" in result.stderr


def test_bad_store_urls_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "garbage.sqlite3").write_text("not a database")
    for store, expected, code in (
        (
            f"sqlite:///{tmp_path}/garbage.sqlite3",
            f"SQLite at {tmp_path}/garbage.sqlite3 unusable: file is not a database",
            1,  # the store's state
        ),
        ("mysql://db", "unsupported store URL", 2),  # bad input
        ("postgresql://agl@127.0.0.1:1/none", "PostgreSQL at 127.0.0.1:1/none unavailable", 1),
    ):
        result = _run_collector(store, 0)
        assert result.returncode == code, (store, result.returncode)
        assert result.stderr.startswith("agl-otel-collector:") and expected in result.stderr
        assert "Traceback" not in result.stderr


def test_sigkill_loses_no_acknowledged_span(tmp_path: Path) -> None:
    store = tmp_path / "durable.sqlite3"
    collector = CollectorProcess(store, "--grpc-port", "-1").start()
    batches = {
        b: make_request([make_span(1000 + b, s + 1, rollout=f"r{b}") for s in range(200)]).SerializeToString()
        for b in range(400)
    }
    acked: set[int] = set()
    lock = threading.Lock()
    stop = threading.Event()

    def sender(worker: int) -> None:
        with httpx.Client(timeout=10) as client:
            for b in range(worker, len(batches), 4):
                if stop.is_set():
                    return
                try:
                    if client.post(collector.otlp_url, content=batches[b], headers=PB).status_code == 200:
                        with lock:
                            acked.add(b)
                except httpx.HTTPError:
                    return  # the collector died mid-request: this batch is not acknowledged

    threads = [threading.Thread(target=sender, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while len(acked) < 60 and time.monotonic() < deadline:
        time.sleep(0.01)
    collector.process.kill()  # SIGKILL in the middle of the stream
    collector.process.wait(timeout=30)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    acked_before_kill = set(acked)
    assert 60 <= len(acked_before_kill) < len(batches)

    with sqlite3.connect(store) as connection:  # every acknowledged span survived the kill
        present = {
            int.from_bytes(row[0], "big") - 1000
            for row in connection.execute("SELECT trace_id FROM agl_spans GROUP BY trace_id HAVING COUNT(*) = 200")
        }
    assert acked_before_kill <= present

    collector.start()  # restart on the same store; the clients resend what was not acknowledged
    with httpx.Client(timeout=10) as client:
        for b in sorted(set(batches) - acked_before_kill) + sorted(acked_before_kill)[:5]:  # and a few dupes
            assert client.post(collector.otlp_url, content=batches[b], headers=PB).status_code == 200
    assert collector.signal(signal.SIGTERM) == 0
    with sqlite3.connect(store) as connection:
        total, distinct = connection.execute(
            "SELECT COUNT(*), COUNT(DISTINCT hex(trace_id) || hex(span_id)) FROM agl_spans"
        ).fetchone()
    assert total == distinct == len(batches) * 200


def test_an_embedded_collector_on_a_fresh_sqlite_file_starts_empty(tmp_path: Path) -> None:
    from lightning_otel.collector.client import Client
    from lightning_otel.collector.server import EmbeddedCollector

    store = tmp_path / "collector.sqlite3"
    with EmbeddedCollector.on_sqlite_file(store) as addresses:
        assert addresses.otlp_grpc is None and store.exists()
        with Client(addresses.query) as client:
            client.enqueue([{"input": {"q": 1}, "task_id": "t1", "group_id": "g", "mode": "train"}])
    with EmbeddedCollector.on_sqlite_file(store) as addresses, Client(addresses.query) as client:
        assert len(client.queued_rollouts(limit=10)) == 1  # kept: the same store
    with EmbeddedCollector.on_sqlite_file(store, fresh=True) as addresses, Client(addresses.query) as client:
        assert client.queued_rollouts(limit=10) == []  # the earlier run's queue is gone
