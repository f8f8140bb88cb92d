"""Seed 003's commands as its tutorial spells them: `agl store --port 9999` starts a collector whose query API (the
store address) is on that port; `AGL_MANAGED_STORE=0` without a store address stops in one line instead of training
on an embedded store behind the user's back; `--llm-proxy` is accepted and says why there is nothing to turn on;
`--external-store-address` is the collector's address. Agent Lightning's other `agl` verbs answer in one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import lightning_otel as agl
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
EXAMPLE = ROOT / "examples" / "agent_grpo"


def test_agl_store_starts_a_collector_whose_query_api_is_on_the_port(tmp_path: Path) -> None:
    port, otlp = free_port(), free_port()
    command = [str(BIN / "agl"), "store", "--port", str(port), "--http-port", str(otlp), "--grpc-port", "-1",
               "--store", f"sqlite:///{tmp_path}/store.sqlite3"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()  # type: ignore[union-attr]
            time.sleep(0.1)
        trainer = agl.Trainer(collector=f"http://127.0.0.1:{port}", n_runners=0)  # what --external-store-address does
        assert trainer.collector == f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=30)
    assert out.splitlines()[0].startswith("agl store: agl-otel-collector")


@pytest.mark.parametrize("argv", [["vllm"], ["agentops"], [], ["serve"]])
def test_other_agl_verbs_answer_in_one_line(argv: list[str]) -> None:
    done = subprocess.run([str(BIN / "agl"), *argv], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_agl_managed_store_0_without_an_address_stops_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, "AGL_MANAGED_STORE": "0"}
    done = subprocess.run([sys.executable, "train_sql_agent.py", "--ci-fast"], cwd=EXAMPLE, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]  # one line, no traceback
    assert "--external-store-address http://localhost:9999" in done.stderr
    monkeypatch.setenv("AGL_MANAGED_STORE", "0")  # the library refuses too: no embedded store behind its back
    with pytest.raises(ValueError, match="AGL_MANAGED_STORE=0: this training starts no collector of its own"):
        agl.Trainer(n_runners=0)
    assert agl.Trainer(n_runners=0, collector="http://127.0.0.1:9999").collector == "http://127.0.0.1:9999"


def test_llm_proxy_is_accepted_and_says_what_it_means(tmp_path: Path) -> None:
    command = [sys.executable, "train_sql_agent.py", "--ci-fast", "--llm-proxy", "--reward-model-url",
               f"http://127.0.0.1:{free_port()}", "--workdir", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, cwd=EXAMPLE, capture_output=True, text=True, timeout=120)
    assert "--llm-proxy: the policy gateway proxies every LLM call" in done.stdout, done.stdout + done.stderr
    assert "unrecognized arguments" not in done.stderr  # then it stops on the missing reward model, as without it
    assert "no reward model at" in done.stderr
