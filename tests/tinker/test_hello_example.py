"""examples/tinker/hello.py as its README runs it: `oneclick` (what CI runs, a few steps), and the distributed
workflow: a collector, `algo`, and two `runner` processes started separately, the second one mid-run."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from lightning_otel.collector import CollectorConfig, EmbeddedCollector

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "tinker" / "hello.py"


def test_oneclick_trains_every_step(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(HELLO), "oneclick", "--ci", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "step 3: reward" in done.stdout and "runners 2" in done.stdout
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 4  # validation at step 0, then 3 steps
    assert (tmp_path / "reward_curve.png").stat().st_size > 0


class Lines:
    """A process's output, read as it comes (to start the second runner once training is under way)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process, self.lines = process, []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert self.process.poll() is None or any(text in line for line in self.lines), "".join(self.lines)
            assert time.monotonic() < deadline, f"no {text!r} in {timeout} s:\n" + "".join(self.lines)
            time.sleep(0.2)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def test_algo_and_runners_started_separately_one_added_mid_run(tmp_path: Path) -> None:
    config = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=f"sqlite:///{tmp_path}/c.sqlite3")
    with EmbeddedCollector(config) as addresses:
        port = addresses.query.rsplit(":", 1)[1]

        def start(*args: str) -> subprocess.Popen[str]:
            return subprocess.Popen([sys.executable, str(HELLO), *args, "--port", port, "--workdir", str(tmp_path)],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip

        algo = Lines(start("algo", "--ci", "--steps", "5"))
        first = Lines(start("runner", "--n-runners", "1"))
        second = None
        try:
            algo.wait_for("step 1: reward", timeout=180)
            second = Lines(start("runner", "--n-runners", "1"))
            assert algo.process.wait(timeout=240) == 0, algo.text
            for runner in (first, second):  # no signal: they stop on the training's end
                assert runner.process.wait(timeout=40) == 0, runner.text
        finally:
            for process in (algo, first, second):
                if process is not None and process.process.poll() is None:
                    process.process.kill()
    steps = [line for line in algo.text.splitlines() if line.startswith("step ") and "reward" in line]
    assert len(steps) == 5 and "runners 1" in steps[0]
    assert "runners 2" in steps[-1], algo.text  # the runner added mid-run took rollouts
    assert "ended (finished): stopping" in second.text and "the run this runner served" in second.text
