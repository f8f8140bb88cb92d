"""OTLP log records: received over HTTP (protobuf, JSON) and gRPC from OpenTelemetry's own SDK exporters, stored
once with their trace and span ids on SQLite and PostgreSQL, read back among their span's events (the trainer's
rollout reads, the rollout view, the Jaeger API), the messages of a call read from its operation-details record
when the span has none, and bad payloads answered with a 4xx while the collector keeps serving."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from lightning_otel import semconv
from lightning_otel.adapters.messages import TraceToMessages
from lightning_otel.collector import Client
from lightning_otel.testing.otlp_factory import kv, span_id, trace_id
from tests.collector.helpers import PB

JS = {"content-type": "application/json"}
MESSAGES_IN = [{"role": "user", "parts": [{"type": "text", "content": "What is 2 + 3?"}]}]
MESSAGES_OUT = [{"role": "assistant", "parts": [{"type": "text", "content": "5"}], "finish_reason": "stop"}]


def stored_logs(collector: Any) -> list[tuple]:
    sql = "SELECT trace_id, span_id, rollout_id, record FROM agl_logs ORDER BY time_ns"
    return collector.run(collector.store.state_transaction(lambda tx: tx.execute(sql)))


def a_call_and_its_details(
    collector: Any, *, grpc: bool = False, rollout: str = "ro-logs", attempt: str = "at-1"
) -> tuple[str, str]:
    """An LLM span with no messages on it, and the operation-details log record of that call inside it, from the
    OpenTelemetry SDK's own exporters (as ADK's newer path writes them); returns the span's (trace id, span id)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    resource = Resource.create(
        {"service.name": "agent", semconv.AGL_ROLLOUT_ID: rollout, semconv.AGL_ATTEMPT_ID: attempt}
    )
    tracer_provider = TracerProvider(resource=resource)
    http = collector.addresses.otlp_http
    tracer_provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{http}/v1/traces")))
    if grpc:
        log_exporter = GrpcLogExporter(endpoint=collector.addresses.otlp_grpc, insecure=True)
    else:
        log_exporter = OTLPLogExporter(f"{http}/v1/logs")
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    tracer = tracer_provider.get_tracer("test")
    attributes = {semconv.GEN_AI_OPERATION_NAME: "chat", semconv.GEN_AI_AGENT_NAME: "solver",
                  semconv.AGL_PROMPT_TOKEN_IDS: [1, 2, 3], semconv.AGL_RESPONSE_TOKEN_IDS: [4, 5],
                  semconv.GEN_AI_RESPONSE_ID: "resp-1"}  # fmt: skip
    with tracer.start_as_current_span("chat policy", attributes=attributes) as span:
        logger_provider.get_logger("test").emit(
            event_name=semconv.GEN_AI_CONTENT_EVENT,
            attributes={
                semconv.GEN_AI_INPUT_MESSAGES: json.dumps(MESSAGES_IN),
                semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps(MESSAGES_OUT),
            },
        )
        context = span.get_span_context()
    logger_provider.shutdown()
    tracer_provider.shutdown()
    return trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id)


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
def test_a_calls_messages_are_read_from_its_log_record(start_collector: Any, grpc: bool) -> None:
    collector = start_collector()
    trace_id, span_id = a_call_and_its_details(collector, grpc=grpc)
    ((stored_trace, stored_span, rollout, _),) = stored_logs(collector)
    assert (stored_trace, stored_span, rollout) == (trace_id, span_id, "ro-logs")
    with Client(collector.addresses.query) as client:
        (span,) = client.rollout_spans("ro-logs")
    (event,) = span["events"]
    assert event["log"] is True and event["name"] == semconv.GEN_AI_CONTENT_EVENT
    examples = TraceToMessages(agent_match="solver").adapt([span])  # the span itself holds no messages
    assert examples == [{"messages": [{"role": "user", "content": "What is 2 + 3?"},
                                      {"role": "assistant", "content": "5"}]}]  # fmt: skip


def test_json_logs_are_stored_once_and_bad_ones_are_refused_with_a_4xx(start_collector: Any) -> None:
    collector = start_collector()
    url = collector.addresses.otlp_http + "/v1/logs"
    record = {"timeUnixNano": "1700000000000000000", "severityText": "INFO", "eventName": "claude_code.api_request",
              "body": {"stringValue": "claude_code.api_request"}, "traceId": "0af7651916cd43dd8448eb211c80319c",
              "spanId": "b7ad6b7169203331",
              "attributes": [{"key": "model", "value": {"stringValue": "policy"}},
                             {"key": "input_tokens", "value": {"intValue": "9553"}}]}  # fmt: skip
    body = {"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "cc"}}]},
                              "scopeLogs": [{"scope": {"name": "events"}, "logRecords": [record]}]}]}  # fmt: skip
    for _ in range(2):  # resent: stored once
        answer = httpx.post(url, content=json.dumps(body), headers=JS)
        assert (answer.status_code, answer.json()) == (200, {})
    ((trace_id, span_id, _, stored),) = stored_logs(collector)
    assert (trace_id, span_id) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    assert json.loads(stored)["attributes"] == {"model": "policy", "input_tokens": 9553}
    bad_id = {**record, "spanId": "b7ad"}
    partial = httpx.post(url, content=json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [bad_id]}]}]}),
                         headers=JS)  # fmt: skip
    assert partial.status_code == 200 and partial.json()["partialSuccess"]["rejectedLogRecords"] == "1"
    for bad in (
        b"{not json",
        b"[]",
        json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": "zz"}]}]}]}).encode(),
    ):
        refused = httpx.post(url, content=bad, headers=JS)
        assert refused.status_code == 400 and "invalid" in refused.json()["message"], refused.text
    assert httpx.post(url, content=b"\x0a\xff", headers=PB).status_code == 400
    assert httpx.post(url, content=b"{}", headers={"content-type": "text/plain"}).status_code == 415
    assert len(stored_logs(collector)) == 1  # nothing else stored, and still serving
    metrics = httpx.get(collector.addresses.query + "/metrics").text
    assert "agl_collector_log_records_stored_total 2.0" in metrics  # the resend counted, kept once
    assert "agl_collector_log_records_rejected_total 1.0" in metrics


def test_the_rollout_view_and_jaeger_show_a_spans_log_records(start_collector: Any) -> None:
    collector = start_collector()
    with Client(collector.addresses.query) as client:
        (queued,) = client.enqueue([{"input": {}, "mode": "dev"}])
        (claimed,) = client.claim("runner-1")["attempts"]
        rollout_id, attempt_id = queued["rollout_id"], claimed["attempt_id"]
        trace_id, span_id = a_call_and_its_details(collector, rollout=rollout_id, attempt=attempt_id)
        client.wait_for_rollout(rollout_id, min_spans=1)
    jaeger = httpx.get(f"{collector.addresses.query}/api/traces/{trace_id}").json()
    (jaeger_span,) = jaeger["data"][0]["spans"]
    fields = {field["key"]: field["value"] for field in jaeger_span["logs"][0]["fields"]}
    assert fields["event"] == semconv.GEN_AI_CONTENT_EVENT and "What is 2 + 3?" in fields[semconv.GEN_AI_INPUT_MESSAGES]
    view = httpx.get(f"{collector.addresses.query}/v1/ui/rollouts/{rollout_id}").json()
    (tree_span,) = view["spans"]
    assert tree_span["spanId"] == span_id
    assert [log["name"] for log in tree_span["logs"]] == [semconv.GEN_AI_CONTENT_EVENT]
    (call,) = view["calls"]
    assert call["output_messages"] == MESSAGES_OUT  # the card shows the messages the log record holds


async def test_each_store_keeps_a_record_once_and_finds_it_by_span_and_by_rollout(span_store: Any) -> None:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    from lightning_otel.collector.receiving.log_records import (
        logs_by_span,
        rollout_logs_without_span,
        rows_of,
        write_logs,
    )

    request = ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add()
    resource_logs.resource.attributes.extend(kv({"service.name": "claude-code", semconv.AGL_ROLLOUT_ID: "r1"}))
    records = resource_logs.scope_logs.add().log_records
    in_span = records.add(time_unix_nano=2, event_name="claude_code.api_request", trace_id=trace_id(1),
                          span_id=span_id(1))  # fmt: skip
    in_span.attributes.extend(kv({"input_tokens": 9553}))
    records.add(time_unix_nano=1, event_name="claude_code.plugin_loaded")  # no span: the rollout's own
    decoded = rows_of(request)
    await write_logs(span_store, decoded.rows)
    await write_logs(span_store, rows_of(request).rows)  # resent
    by_span = await logs_by_span(span_store, [trace_id(1).hex()])
    ((key, (record,)),) = by_span.items()
    assert key == (trace_id(1).hex(), span_id(1).hex()) and record["attributes"] == {"input_tokens": 9553}
    (apart,) = await rollout_logs_without_span(span_store, "r1", None)
    assert apart["eventName"] == "claude_code.plugin_loaded" and apart["service"] == "claude-code"
