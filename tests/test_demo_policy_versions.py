"""One policy version count, as a user meets it: a short synchronous `lightning-otel demo` (VERL on CPU), then the
four places a version shows read back, which agree on every step: the console's `policy v`, every LLM span's
`agl.llm.policy_version` and each rollout's queued version in the store, `lightning-otel export --shape rollouts`, and
the rollout view (/ui). Step k samples with the weights published after step k-1: version k-1 (0: the first)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx

from lightning_otel import semconv
from lightning_otel.collector import Client, EmbeddedCollector

STEPS = 4


def test_the_console_the_spans_the_export_and_the_view_agree_on_every_steps_version(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "lightning_otel.cli", "demo", "--steps", str(STEPS), "--workdir", "agl-demo"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    console = {int(step): int(version) for step, version in re.findall(r"step (\d+): .*policy v (\d+)", done.stdout)}
    assert console == {step: step - 1 for step in range(1, STEPS + 1)}, done.stdout

    store = tmp_path / "agl-demo" / "collector.sqlite3"
    exported = tmp_path / "rollouts.jsonl"
    export = [sys.executable, "-m", "lightning_otel.cli", "export", str(store), str(exported), "--shape", "rollouts"]
    ran = subprocess.run(export, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    by_export = {row["rollout_id"]: row for row in rows if row["mode"] == "train"}

    with EmbeddedCollector.on_sqlite_file(store) as addresses, Client(addresses.query) as client:
        train = [r for r in client.queued_rollouts(limit=1000) if r["mode"] == "train"]
        assert len(train) == STEPS * 16 and len(by_export) == len(train)
        spans = client.rollouts_spans([r["rollout_id"] for r in train], latest=True)
        (run,) = httpx.get(f"{addresses.query}/v1/ui/runs").json()["runs"]
        view = {step: httpx.get(f"{addresses.query}/v1/ui/runs/{run['run_id']}/train/{step}").json()
                for step in range(1, STEPS + 1)}  # fmt: skip
    for record in train:
        step, rollout_id = record["metadata"]["step"], record["rollout_id"]
        expected = console[step]
        assert record["metadata"]["policy_version"] == expected  # queued under
        sampled = {s["attributes"].get(semconv.AGL_POLICY_VERSION) for s in spans[rollout_id]
                   if semconv.AGL_RESPONSE_TOKEN_IDS in s["attributes"]}  # fmt: skip
        assert sampled == {expected}, (step, sampled)  # sampled by: the client's and the gateway's spans
        row = by_export[rollout_id]
        assert row["policy_version"] == expected and {c["policy_version"] for c in row["calls"]} == {expected}
    for step, page in view.items():
        assert {r["policy_version"] for r in page["rollouts"]} == {console[step]}
        assert page["sampled_versions"] == {str(console[step]): len(page["rollouts"])}
        assert page["trainer_metrics"]["training/policy_version"] == console[step]
