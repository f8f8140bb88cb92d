"""A real trace UI beside ours: Arize Phoenix (from PyPI, offline) receives what `agl-otel-collector --forward-otlp`
forwards from a demo run, and its REST API shows the same span tree with our GenAI attributes, agent and LLM spans
classified as such. Runs in its own environment: `nox -s phoenix`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lightning_otel.collector import Client
from tests.helpers import free_port

BIN = Path(sys.executable).parent


def wait_http(url: str, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode} before answering {url}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer in {timeout_s} s")


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port, grpc_port = free_port(), free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(tmp_path_factory.mktemp("phoenix")),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.STDOUT}
    process = subprocess.Popen([str(BIN / "phoenix"), "serve"], env=env, **quiet)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", process, 180)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture(scope="module")
def collector(phoenix: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    http_port, query_port = free_port(), free_port()
    store = tmp_path_factory.mktemp("store") / "c.sqlite3"
    command = [str(BIN / "agl-otel-collector"), "--store", f"sqlite:///{store}", "--http-port", str(http_port),
               "--grpc-port", "-1", "--query-port", str(query_port), "--forward-otlp", phoenix,
               "--phoenix-ui-url", phoenix]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_http(f"http://127.0.0.1:{query_port}/healthz", process, 60)
        yield {"otlp": f"http://127.0.0.1:{http_port}", "query": f"http://127.0.0.1:{query_port}"}
    finally:
        process.terminate()
        process.wait(30)


def phoenix_spans(phoenix: str) -> list[dict[str, Any]]:
    spans, cursor = [], None
    while True:
        params = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = httpx.get(f"{phoenix}/v1/projects/default/spans", params=params, timeout=30).json()
        spans += page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return spans


def test_a_demo_run_forwarded_to_phoenix_arrives_as_the_same_span_tree(phoenix: str, collector: dict) -> None:
    demo = subprocess.run([str(BIN / "lightning-otel"), "demo", "--trace-only", "--endpoint", collector["otlp"]],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr  # OTEL_TRACES_EXPORTER=none (conftest): --endpoint wins
    client = Client(collector["query"])
    ours = [span for r in client.rollouts() for span in client.rollout_spans(r["rollout_id"])]
    assert len(ours) == 15  # 3 rollouts: writer and checker agents, their 2 LLM calls, a reward
    deadline = time.monotonic() + 60
    while len(theirs := phoenix_spans(phoenix)) < len(ours) and time.monotonic() < deadline:
        time.sleep(0.5)
    by_id = {span["context"]["span_id"]: span for span in theirs}
    assert len(by_id) == len(ours), f"Phoenix has {len(by_id)} spans, the collector {len(ours)}"
    kinds = {"invoke_agent": "AGENT", "chat": "LLM", "execute_tool": "TOOL"}
    for span in ours:
        arrived = by_id[span["spanId"]]
        assert arrived["name"] == span["name"]
        assert arrived["parent_id"] == span["parentSpanId"]  # the same tree
        assert arrived["context"]["trace_id"] == span["traceId"]
        operation = span["attributes"].get("gen_ai.operation.name")
        if operation in kinds:
            assert arrived["span_kind"] == kinds[operation], span["name"]
        for key in ("gen_ai.agent.name", "agl.rollout.id", "agl.llm.response_token_ids", "agl.reward.value"):
            if key in span["attributes"]:
                assert arrived["attributes"][key] == span["attributes"][key], key
    # the rollout view links each trace to Phoenix's trace redirect, which Phoenix serves
    trace_id = ours[0]["traceId"]
    assert httpx.get(f"{phoenix}/redirects/traces/{trace_id}", timeout=30).status_code == 200
