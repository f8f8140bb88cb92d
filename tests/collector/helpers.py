"""Small helpers shared by the collector tests."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from lightning_otel.testing.otlp_factory import make_request
from lightning_otel.testing.ports import free_ports

PB = {"content-type": "application/x-protobuf"}


def send(collector, spans) -> None:
    body = make_request(spans).SerializeToString()
    assert httpx.post(collector.addresses.otlp_http + "/v1/traces", content=body, headers=PB).status_code == 200


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def stored_ids(collector) -> list[tuple[bytes, bytes]]:
    spans = collector.run(collector.store.spans_after(0, 100_000))
    return [(s.trace_id, s.span_id) for s in spans]


class CollectorProcess:
    """`agl-otel-collector` as a child process on free ports: a SQLite file (or any store URL), `start()` again on
    the same ports and store after a kill."""

    def __init__(self, store: Path | str, *extra: str, env: dict[str, str] | None = None) -> None:
        self.http_port, self.grpc_port, self.query_port = free_ports(3)
        self.args = [
            sys.executable,
            "-m",
            "lightning_otel.collector",
            "--store",
            store if isinstance(store, str) else f"sqlite:///{store}",
            "--http-port",
            str(self.http_port),
            "--grpc-port",
            str(self.grpc_port),
            "--query-port",
            str(self.query_port),
            *extra,
        ]
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def start(self) -> CollectorProcess:
        self.output = []
        self.process = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise AssertionError(f"collector exited: {''.join(self.output)}")
            self.output.append(line)
            if line.startswith("  store"):
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        raise AssertionError("collector did not get ready in 30 s")

    def _drain(self) -> None:
        for line in self.process.stdout:  # type: ignore[union-attr]
            self.output.append(line)

    @property
    def otlp_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/v1/traces"

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.query_port}"

    def signal(self, signum: int) -> int:
        assert self.process is not None
        self.process.send_signal(signum)
        return self.process.wait(timeout=30)
