"""The chaos run's processes (`benchmarks.chaos`): a supervised child process, a collector on ports of its own that
starts again on them, a Ray head of the run's own (several runs share a machine), and what finds and kills their
processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from lightning_otel.testing.ports import free_ports

ROOT = Path(__file__).resolve().parent.parent
RAY_ENV = {"RAY_AUTH_MODE": "disabled"}  # loopback only, one user: Ray's token file would be shared by every head
RAY_PORT_FLAGS = ("--ray-client-server-port", "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
                  "--metrics-export-port", "--runtime-env-agent-port", "--node-manager-port",
                  "--object-manager-port")  # fmt: skip


class Child:
    """A supervised process: its output appended to `log`, started again by whoever supervises it."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.argv, self.log, self.env = name, list(argv), log, {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, argv: Sequence[str] | None = None) -> Child:
        self.starts += 1
        with self.log.open("ab") as out:
            out.write(f"\n=== {self.name} start {self.starts} at {time.strftime('%H:%M:%S')}\n".encode())
            self.process = subprocess.Popen(list(argv or self.argv), stdout=out, stderr=subprocess.STDOUT,
                                            env=self.env, cwd=ROOT, start_new_session=True)  # fmt: skip
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, number: int) -> None:
        if self.alive:
            os.kill(self.process.pid, number)  # type: ignore[union-attr]

    def end(self) -> None:
        if self.alive:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.process.wait(20)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)


class Collector(Child):
    def __init__(self, name: str, store: str, folder: Path) -> None:
        self.http_port, self.grpc_port, self.query_port = free_ports(3)
        super().__init__(name, [sys.executable, "-m", "lightning_otel.collector", "--store", store, "--http-port",
                                str(self.http_port), "--grpc-port", str(self.grpc_port), "--query-port",
                                str(self.query_port)], folder / f"{name}.log")  # fmt: skip
        self.url = f"http://127.0.0.1:{self.query_port}"

    def start(self, argv: Sequence[str] | None = None) -> Collector:
        super().start(argv)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} did not answer in 60 s (its log: {self.log})")


class RayHead:
    """`ray start --head` on ports of its own (several runs share the machine) and a temp dir of its own."""

    def __init__(self, folder: Path, cpus: int, index: int) -> None:
        self.temp = Path(tempfile.mkdtemp(prefix="ray-chaos-", dir="/tmp"))
        self.port, *others = free_ports(len(RAY_PORT_FLAGS) + 1)
        ports = {flag: str(port) for flag, port in zip(RAY_PORT_FLAGS, others, strict=True)}
        low = 10000 + 1000 * (index % 20)  # a worker port range of its own, below the ephemeral ports above
        flags = (f"--head --port {self.port} --num-cpus {cpus} --include-dashboard=false --disable-usage-stats "
                 f"--node-ip-address 127.0.0.1 --temp-dir {self.temp} --min-worker-port {low} --max-worker-port "
                 f"{low + 999}")  # fmt: skip
        port_flags = [item for pair in ports.items() for item in pair]
        self.argv = [str(Path(sys.executable).parent / "ray"), "start", *flags.split(), *port_flags]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0", **RAY_ENV}
        self.log = folder / "ray.log"
        self.address = f"127.0.0.1:{self.port}"

    def start(self) -> RayHead:
        with self.log.open("ab") as out:
            subprocess.run(self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, check=True, timeout=180)
        return self

    def stop(self) -> None:
        # not `ray stop`, which stops every Ray of this user: ours are the processes naming this head's temp dir or
        # address (GCS, raylet, the client server) and every process under them (workers, agents)
        roots = {*_pids_whose_cmdline_has(str(self.temp)), *_pids_whose_cmdline_has(self.address)}
        for pid in [*_descendants(roots), *roots]:
            kill(pid)

    def runner_actor_pids(self) -> list[int]:
        """The Ray runner actors' processes of this head: titled `ray::RunnerActor`, children of its raylet."""
        raylets = set(_pids_whose_cmdline_has(str(self.temp)))
        return [pid for pid in _pids_whose_cmdline_has("ray::RunnerActor") if _parent(pid) in raylets]


def _pids_whose_cmdline_has(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _descendants(roots: set[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            children.setdefault(_parent(int(entry.name)), []).append(int(entry.name))
    found, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _parent(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def kill(pid: int, number: int = signal.SIGKILL) -> bool:
    try:
        os.kill(pid, number)
        return True
    except ProcessLookupError:
        return False
