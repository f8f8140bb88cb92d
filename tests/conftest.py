"""Shared test setup: no exporter, no network (LiteLLM's model cost map stays local)."""

from __future__ import annotations

import compileall
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("OTEL_TRACES_EXPORTER", "none")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# With several xdist workers, each worker and every process it starts (trainers, engines, Ray workers) would take a
# thread per core for torch's and OpenMP's pools: two workers on two cores ran four or more spinning threads. A
# worker's share of the cores instead (2 cores: the main suite 1,881 s -> 1,724 s idle, with the day's other cuts;
# two torch-heavy files beside a training 631 s -> 328 s).
if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))

# Lanes with their own environments (nox) live beside the main suite; the main run does not collect them.
LANES = ["jaeger_lane", "frameworks", "verl_lane", "browser_lane", "phoenix_lane"]
collect_ignore = [] if os.environ.get("AGL_LANE") else LANES
ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("lightning_otel", "collector", "instrumentors", "tests", "benchmarks", "examples")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Where bytecode is not written (PYTHONDONTWRITEBYTECODE, as CI sets it), each of the hundreds of processes the
    tests start (runners, trainers, collectors, CLIs) compiled this checkout's modules again on import (~0.3 s of
    CPU each): compile them once, before the workers start (the controller only; 3 s)."""
    if sys.flags.dont_write_bytecode and not hasattr(session.config, "workerinput"):
        skip = re.compile(r"node_modules|[/\\]runs[/\\]|[/\\]\.venv")  # installed packages, run outputs
        for name in SOURCES:
            if (ROOT / name).is_dir():  # a lane's copy has no sources (it runs the installed wheel)
                compileall.compile_dir(ROOT / name, quiet=1, rx=skip)


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[str]:
    """An embedded collector on a fresh SQLite file: its query URL (files with their own `collector` use theirs)."""
    from lightning_otel.collector import CollectorConfig, EmbeddedCollector  # lanes import this conftest too

    config = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=f"sqlite:///{tmp_path}/c.sqlite3")
    with EmbeddedCollector(config) as addresses:
        yield addresses.query


@pytest.fixture
def chat_replica() -> Iterator[Any]:
    """A replica that speaks chat with vLLM's token ids (the test server), for the gateway's dialects."""
    from lightning_otel.testing import OpenAITestServer

    with OpenAITestServer() as server:
        yield server


@pytest.fixture
def replica_gateway(chat_replica: Any) -> Iterator[Any]:
    """A policy gateway in front of `chat_replica`."""
    from lightning_otel.serving.gateway import GatewayServer, PolicyGateway

    with GatewayServer(PolicyGateway([chat_replica.base_url])) as server:
        yield server
