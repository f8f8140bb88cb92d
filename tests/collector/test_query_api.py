"""Query API: Jaeger legacy and v3 JSON checked against expected files written from Jaeger's documented shapes,
search parameters, error envelopes; rollout reads (single, batch, event-driven wait) through the Python client."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import httpx
import pytest

from lightning_otel.collector import AsyncClient, Client, CollectorError
from lightning_otel.testing.otlp_factory import BASE_NS, golden_request, make_request, make_span
from tests.collector.helpers import PB

GOLDEN = Path(__file__).parent / "golden"
TRACE = "0000000000000abc"  # Jaeger prints a 128-bit id whose high half is zero as 16 hex digits


@pytest.fixture
def collector(start_collector):
    started = start_collector()
    response = httpx.post(
        started.addresses.otlp_http + "/v1/traces", content=golden_request().SerializeToString(), headers=PB
    )
    assert response.status_code == 200
    return started


def check_golden(name: str, document: object) -> None:
    path = GOLDEN / name
    if os.environ.get("AGL_UPDATE_GOLDEN"):
        path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    assert document == json.loads(path.read_text())


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("jaeger_trace.json", f"/api/traces/{TRACE}"),
        ("jaeger_trace.json", "/api/traces/00000000000000000000000000000abc"),
        ("jaeger_search.json", "/api/traces?service=sql-agent&tags=%7B%22gen_ai.agent.name%22%3A%22writer%22%7D"),
        ("jaeger_services.json", "/api/services"),
        ("jaeger_service_operations.json", "/api/services/sql-agent/operations"),
        ("jaeger_operations.json", "/api/operations?service=sql-agent"),
        ("v3_trace.json", f"/api/v3/traces/{TRACE}"),
        ("v3_services.json", "/api/v3/services"),
        ("v3_operations.json", "/api/v3/operations?service=sql-agent&span_kind=client"),
    ],
)
def test_jaeger_shapes(collector, name: str, path: str) -> None:
    response = httpx.get(collector.addresses.query + path)
    assert response.status_code == 200
    check_golden(name, response.json())


def test_jaeger_search_parameters(collector) -> None:
    query = collector.addresses.query

    def found(params: dict) -> int:
        response = httpx.get(query + "/api/traces", params={"service": "sql-agent", **params})
        assert response.status_code == 200, response.text
        return len(response.json()["data"])

    start_us = BASE_NS // 1000
    assert found({}) == 1
    assert found({"operation": "chat tiny"}) == 1
    assert found({"operation": "nothing"}) == 0
    assert found({"tag": "error:true"}) == 1
    assert found({"tag": "span.kind:client"}) == 1
    assert found({"tags": '{"agl.rollout.id":"r-2"}'}) == 0
    assert found({"start": start_us, "end": start_us + 10_000}) == 1
    assert found({"start": start_us + 10_000}) == 0
    assert found({"minDuration": "4ms"}) == 1
    assert found({"minDuration": "6ms"}) == 0
    assert found({"maxDuration": "150us", "operation": "execute_tool sql"}) == 1
    assert found({"limit": 1}) == 1
    v3 = httpx.get(
        query + "/api/v3/traces",
        params={
            "query.service_name": "sql-agent",
            "query.operation_name": "chat tiny",
            "query.start_time_min": "2026-09-21T00:00:00Z",
            "query.start_time_max": "2026-09-23T00:00:00.123456789Z",
            "query.attributes[gen_ai.agent.name]": "writer",
        },
    )
    assert v3.status_code == 200, v3.text
    assert len(v3.json()["result"]["resourceSpans"][0]["scopeSpans"][0]["spans"]) == 3
    camel = httpx.get(query + "/api/v3/traces", params={"query.serviceName": "sql-agent", "query.durationMin": "4ms"})
    assert camel.status_code == 200


def test_errors_have_jaeger_envelopes(collector) -> None:
    query = collector.addresses.query
    missing = httpx.get(query + "/api/traces/00000000000000000000000000000fff")
    assert missing.status_code == 404
    assert missing.json() == {
        "data": None,
        "total": 0,
        "limit": 0,
        "offset": 0,
        "errors": [{"code": 404, "msg": "trace not found"}],
    }
    bad = httpx.get(query + "/api/traces/xyz")
    assert bad.status_code == 400 and bad.json()["errors"][0]["code"] == 400
    assert httpx.get(query + "/api/traces", params={"minDuration": "soon"}).status_code == 400
    assert httpx.get(query + "/api/traces", params={"tags": "[1]"}).status_code == 400
    v3_missing = httpx.get(query + "/api/v3/traces/00000000000000000000000000000fff")
    assert v3_missing.status_code == 404
    assert v3_missing.json()["error"]["httpCode"] == 404
    assert httpx.get(query + "/api/v3/traces", params={"query.start_time_min": "yesterday"}).status_code == 400


def test_client_reads_rollouts(collector) -> None:
    client = Client(collector.addresses.query)
    spans = client.rollout_spans("r-1")
    assert [s["name"] for s in spans] == ["invoke_agent writer", "chat tiny", "execute_tool sql"]
    llm = spans[1]
    assert llm["attributes"]["agl.llm.prompt_token_ids"] == [151644, 8948]
    assert llm["parentSpanId"] == spans[0]["spanId"] and llm["service"] == "sql-agent"
    (summary,) = client.rollouts()
    assert summary["rollout_id"] == "r-1" and summary["span_count"] == 3 and summary["agents"] == ["writer"]
    assert client.rollout_spans("r-1", latest=True) == spans
    assert client.rollout_spans("r-1", attempt_id="a-9") == []
    assert client.rollouts_spans(["r-1", "none"]) == {"r-1": spans, "none": []}
    with pytest.raises(CollectorError):
        Client("http://127.0.0.1:9", retry_for_s=0).rollouts()  # (by default it would ride out 300 s of this)


def test_wait_for_rollout_is_woken_by_the_commit(collector) -> None:
    client = Client(collector.addresses.query)

    def late_writer() -> None:
        time.sleep(0.5)
        body = make_request([make_span(77, s + 1, rollout="late") for s in range(4)]).SerializeToString()
        httpx.post(collector.addresses.otlp_http + "/v1/traces", content=body, headers=PB)

    threading.Thread(target=late_writer).start()
    started = time.monotonic()
    spans = client.wait_for_rollout("late", min_spans=4, timeout=20)
    waited = time.monotonic() - started
    assert len(spans) == 4
    assert 0.4 < waited < 5  # returned on the commit, not at the timeout
    started = time.monotonic()
    assert client.wait_for_rollout("never", min_spans=1, timeout=0.5) == []
    assert 0.4 < time.monotonic() - started < 5


async def test_async_client(collector) -> None:
    async with AsyncClient(collector.addresses.query) as client:
        assert len(await client.rollout_spans("r-1")) == 3
        assert len(await client.wait_for_rollout("r-1", min_spans=3, timeout=5)) == 3
        assert (await client.rollouts_spans(["r-1"]))["r-1"][0]["name"] == "invoke_agent writer"
        assert (await client.rollouts())[0]["rollout_id"] == "r-1"
