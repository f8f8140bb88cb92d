"""An independent Jaeger API client from PyPI (jaeger-mcp's JaegerClient) lists services, searches and fetches a
trace from our collector's Jaeger query API. Runs in its own environment: `nox -s jaeger_client`."""

from __future__ import annotations

import httpx
from jaeger_mcp.facade import JaegerClient

from lightning_otel.collector.server import CollectorConfig, EmbeddedCollector
from lightning_otel.testing.otlp_factory import golden_request


def test_jaeger_mcp_reads_our_store(tmp_path) -> None:
    config = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=f"sqlite:///{tmp_path}/j.sqlite3")
    with EmbeddedCollector(config) as addresses:
        response = httpx.post(
            addresses.otlp_http + "/v1/traces",
            content=golden_request().SerializeToString(),
            headers={"content-type": "application/x-protobuf"},
        )
        assert response.status_code == 200
        client = JaegerClient.from_env(url=addresses.query)
        assert client.list_services() == ["sql-agent"]
        (summary,) = client.search_traces("sql-agent", tags={"gen_ai.agent.name": "writer"})
        trace = client.get_trace(summary.trace_id)
        assert trace.trace_id == "0000000000000abc"
        assert sorted(span.operation for span in trace.spans) == [
            "chat tiny",
            "execute_tool sql",
            "invoke_agent writer",
        ]
        assert trace.root_operation == "invoke_agent writer" and trace.root_service == "sql-agent"
        assert trace.errors_count == 1
        assert trace.duration_us == 5000
