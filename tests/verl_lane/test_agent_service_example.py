"""The agent-service example as its README runs it: the OpenAI Agents SDK service in its own environment (the
`openai_agents` lane's: openai 3.x, which this one cannot hold), the trainer here with VERL on CPU. Two GRPO steps
against the service instrumented by `lightning-otel-run` with default exporter settings (its spans arrive ~5 s after
it answered); every call the gateway served must become a sample named by the service's agent. (A bare service, the
gateway's spans alone, trains the same way: tests/training/test_loop.py checks that path without a verl start.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agent_service"
SERVICE_PYTHON = os.environ.get("AGL_SERVICE_PYTHON", "")  # the noxfile points it at the openai_agents lane's env


@pytest.fixture(scope="module")
def service_bin() -> Path:
    if not SERVICE_PYTHON or not Path(SERVICE_PYTHON).exists():
        if os.environ.get("CI"):
            pytest.fail(f"AGL_SERVICE_PYTHON={SERVICE_PYTHON!r}: the service's environment is missing in CI")
        pytest.skip("the service's environment is missing (run the openai_agents nox session first)")
    return Path(SERVICE_PYTHON).parent


def _start_service(command: list[str], port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(command, cwd=EXAMPLE, env=env)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the agent service did not start: {command}")
        time.sleep(0.2)


@pytest.fixture(params=["instrumented"])
def service(request: pytest.FixtureRequest, service_bin: Path) -> Iterator[tuple[str, str, int]]:
    """(mode, the service's /chat URL, the OTLP port the trainer's collector must listen on)."""
    port, otlp_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGL_"))}  # default exporter settings
    uvicorn = [str(service_bin / "uvicorn"), "agent_server:app", "--port", str(port), "--log-level", "warning"]
    if request.param == "instrumented":
        command = [str(service_bin / "lightning-otel-run"), "--endpoint", f"http://127.0.0.1:{otlp_port}",
                   "--service-name", "agent-service", "--", *uvicorn]  # fmt: skip
    else:
        command = uvicorn
    process = _start_service(command, port, env)
    try:
        yield request.param, f"http://127.0.0.1:{port}/chat", otlp_port
    finally:
        process.terminate()
        process.wait(30)


def test_two_grpo_steps_train_every_call_the_service_made(service: tuple[str, str, int], tmp_path: Path) -> None:
    mode, url, otlp_port = service
    done = subprocess.run(
        [sys.executable, "train_agent_service.py", "--ci-fast", "--device", "cpu", "--agent-url", url,
         "--otlp-port", str(otlp_port), "--collector-port", "0", "--workdir", str(tmp_path),
         "--notify-file", str(tmp_path / "llm_server.json")],
        cwd=EXAMPLE, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [step["step"] for step in summary["steps"]] == [1, 2]
    for step in summary["steps"]:
        metrics = step["metrics"]
        assert metrics["rollout/succeeded"] == metrics["rollout/rollouts"] == 4  # 2 tasks x 2 rollouts
        assert metrics["rollout/triplets"] == metrics["rollout/gateway_calls"] > 0  # every served call is a sample
        assert set(step["sample_agents"]) == {"Assistant"} and metrics["rollout/incomplete_rollouts"] == 0
        assert metrics["training/skipped_step"] == 0 and metrics["rollout/calls_without_token_ids"] == 0
        # instrumented: the service's own LLM spans arrived (late) and were read beside the gateway's
        expected_twins = metrics["rollout/gateway_calls"] if mode == "instrumented" else 0
        assert metrics["rollout/duplicate_calls"] == expected_twins
    policy = json.loads((tmp_path / "llm_server.json").read_text())  # the notify file: the gateway's address
    assert policy["base_url"] == f"http://{policy['address']}/v1" and policy["version"] >= 2
