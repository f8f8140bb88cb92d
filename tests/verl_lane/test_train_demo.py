"""`lightning-otel demo` from the installed wheel, asynchronous (`--max-staleness 1`: verl's CPU replicas serve while
the actor trains): its output is short (our lines; other libraries' go to demo.log), and the rollout view opens on
its store as the demo says and shows the run as asynchronous."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.helpers import free_port


def test_the_demo_runs_from_the_wheel_quietly_and_its_rollout_view_opens(tmp_path: Path) -> None:
    """Its 40-step learning run is README command 1, which CI runs on every landing, and which fails when the reward
    did not rise by 0.05 (tests/test_demo_and_example.py checks that verdict); here a 4-step smoke run of the
    installed wheel, asynchronous (the synchronous loop is what CI's demo runs): the output, the files, the rollout
    view."""
    command = [sys.executable, "-m", "lightning_otel.cli", "demo", "--steps", "4", "--workdir", "agl-demo",
               "--max-staleness", "1"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rewards = [float(reward) for _, reward in re.findall(r"step (\d+): reward ([0-9.]+)", done.stdout)]
    assert len(rewards) == 4, done.stdout
    assert "4 steps: too few to judge the rise" in done.stdout
    assert "asynchronous (max_staleness=1)" in done.stdout
    work = tmp_path / "agl-demo"
    assert (work / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # quiet: our lines only, every other library's in demo.log
    assert len(done.stdout.splitlines()) <= 25 and not done.stderr.strip(), (done.stdout, done.stderr[-2000:])
    assert (work / "demo.log").stat().st_size > 0
    # the rollout view, opened the way the demo's last line says, finds the demo's rollouts
    (ui,) = re.findall(r"(lightning-otel ui \S+ --tokenizer \S+)", done.stdout)
    port = free_port()
    viewer = subprocess.Popen([sys.executable, "-m", "lightning_otel.cli", *ui.split()[1:], "--port", str(port)],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        first_line = viewer.stdout.readline()  # type: ignore[union-attr]
        assert f"http://127.0.0.1:{port}/ui" in first_line, first_line
        counts = httpx.get(f"http://127.0.0.1:{port}/v1/queue/stats").json()["counts"]
        # every step's groups ran; a group dropped as too old ran again (a warning in demo.log says which)
        assert set(counts) <= {"succeeded", "queuing", "running", "failed", "timeout", "cancelled"}, counts
        assert counts["succeeded"] >= 4 * 4 * 4 and not counts.get("failed"), counts
        (run,) = httpx.get(f"http://127.0.0.1:{port}/v1/ui/runs").json()["runs"]
        assert run["max_staleness"] == 1
    finally:
        viewer.terminate()
        viewer.wait(30)
    # the docs' export commands on the demo's store: the writer's calls as SFT rows, its groups as DPO pairs
    for out, shape in (("sft.jsonl", "sft"), ("pairs.parquet", "pairs")):
        export = [sys.executable, "-m", "lightning_otel.cli", "export", "agl-demo/collector.sqlite3", out,
                  "--shape", shape]  # fmt: skip
        exported = subprocess.run(export, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert exported.returncode == 0, exported.stdout + exported.stderr
        assert "0 of them without token ids" in exported.stdout, exported.stdout
