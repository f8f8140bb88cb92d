"""The GenAI conventions switch (`OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`, `capture.conventions`):
a framework's runner entry span becomes a conversation turn, content blocks no part fits become generic parts,
content `true` records the operation-details event too; without the switch nothing changes. The framework lanes
(OpenAI Agents, Google ADK) check the same on their real runs, and that the adapter trains the same samples."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import lightning_otel
from lightning_otel import semconv
from lightning_otel.capture.conventions import ConversationTurnProcessor, latest_genai
from lightning_otel.capture.message_content import input_messages
from lightning_otel.capture.settings import CaptureSettings, ContentCapture, settings
from lightning_otel.collector import CollectorConfig, EmbeddedCollector
from lightning_otel.export.dataset_export import export_dataset
from lightning_otel.testing import OpenAITestServer, runtime_agents


def test_the_switch_is_the_conventions_own_comma_separated_list() -> None:
    assert latest_genai({"OTEL_SEMCONV_STABILITY_OPT_IN": "http, gen_ai_latest_experimental"})
    assert not latest_genai({"OTEL_SEMCONV_STABILITY_OPT_IN": "http"}) and not latest_genai({})


def _spans(opted_in: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict]:
    monkeypatch.setattr(settings, "latest_genai", opted_in)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(ConversationTurnProcessor())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("adk-like")
    entry = {semconv.GEN_AI_OPERATION_NAME: "invoke_workflow", semconv.GEN_AI_WORKFLOW_NAME: "coordinator"}
    with tracer.start_as_current_span("invoke_workflow coordinator", attributes=entry):
        nested = {**entry, semconv.GEN_AI_WORKFLOW_NAME: "inner", semconv.GEN_AI_WORKFLOW_NESTED: True}
        with tracer.start_as_current_span("invoke_workflow inner", attributes=nested):
            pass
    return {span.name: dict(span.attributes or {}) for span in exporter.get_finished_spans()}


def test_a_runners_entry_span_becomes_a_conversation_turn_only_when_opted_in(monkeypatch: pytest.MonkeyPatch) -> None:
    latest = _spans(True, monkeypatch)
    assert latest["handle_conversation_turn coordinator"][semconv.GEN_AI_OPERATION_NAME] == "handle_conversation_turn"
    assert latest["handle_conversation_turn coordinator"][semconv.GEN_AI_INVOCATION_IS_NESTED] is False
    assert latest["invoke_workflow inner"][semconv.GEN_AI_INVOCATION_IS_NESTED] is True  # a workflow inside stays
    default = _spans(False, monkeypatch)
    assert sorted(default) == ["invoke_workflow coordinator", "invoke_workflow inner"]
    assert all(semconv.GEN_AI_INVOCATION_IS_NESTED not in attributes for attributes in default.values())


def test_content_blocks_no_part_fits_are_generic_parts_when_opted_in(monkeypatch: pytest.MonkeyPatch) -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]}
    assert input_messages(body)[0]["parts"] == [{"type": "text", "content": "What is this?"}]  # as always
    monkeypatch.setattr(settings, "latest_genai", True)
    assert input_messages(body)[0]["parts"] == [
        {"type": "generic", "generic_type": "image_url", "image_url": {"url": "https://example.com/a.png",
                                                                       "detail": "low"}},
        {"type": "text", "content": "What is this?"},
    ]  # fmt: skip
    json.dumps(input_messages(body))  # serializable as the span attribute is


def test_content_on_records_the_operation_details_event_too_when_opted_in(monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = CaptureSettings()
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    chosen.configure(capture_content=True)
    assert chosen.latest_genai and chosen.content is ContentCapture.SPAN_AND_EVENT
    chosen.configure(capture_content="SPAN_ONLY")  # a mode named: kept as named
    assert chosen.content is ContentCapture.SPAN_ONLY
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN")
    chosen.configure(capture_content=True)
    assert not chosen.latest_genai and chosen.content is ContentCapture.SPAN_ONLY


def test_with_the_opt_in_the_operation_details_event_reaches_the_collector_as_a_log_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner with the latest conventions and content as the event only: each LLM call's messages leave as a log
    record with the call's span ids (none on the span: no attribute, no span event); the collector joins it to
    the span, so the adapter and the export read the messages as before."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "EVENT_ONLY")
    store = tmp_path / "collector.sqlite3"
    with OpenAITestServer() as server:
        trainer = lightning_otel.Trainer(
            n_runners=1, initial_resources={"main_llm": lightning_otel.LLM(server.base_url, "agl-tiny")},
            collector=CollectorConfig.embedded(store_url=f"sqlite:///{store}"), progress=False,
        )  # fmt: skip
        tasks = [{"id": "t0", "question": "what is 2 + 2?"}, {"id": "t1", "question": "what is 3 + 3?"}]
        (batch,) = trainer.dev(runtime_agents.flaky_agent, tasks, print_spans=False).train
    calls = [s for spans in batch.spans.values() for s in spans
             if (s.get("attributes") or {}).get(semconv.GEN_AI_OPERATION_NAME) == "chat"]  # fmt: skip
    assert len(calls) == 2
    with sqlite3.connect(store) as db:
        records = db.execute("SELECT span_id, rollout_id, record FROM agl_logs").fetchall()
    assert sorted(r[0] for r in records) == sorted(c["spanId"] for c in calls)  # one record per call, its span's
    assert {r[1] for r in records} == set(batch.spans)  # each names its rollout too
    for _, _, raw in records:
        record = json.loads(raw)
        assert record["eventName"] == semconv.GEN_AI_CONTENT_EVENT
        assert "what is" in json.dumps(record["attributes"][semconv.GEN_AI_INPUT_MESSAGES])
    for call in calls:
        attributes = call["attributes"]
        assert semconv.GEN_AI_INPUT_MESSAGES not in attributes  # EVENT_ONLY: not on the span
        events = [e for e in call.get("events") or () if e.get("name") == semconv.GEN_AI_CONTENT_EVENT]
        assert len(events) == 1 and events[0].get("log"), call  # the record, read among its events; no span event
    rows = export_dataset(store, tmp_path / "sft.jsonl", agent_match=None, progress=False)
    assert rows.rows == 2
    messages = [json.loads(line)["messages"] for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert sorted(m[0]["content"] for m in messages) == ["what is 2 + 2?", "what is 3 + 3?"]


AGENT = """
import openai, sys
import lightning_otel
lightning_otel.instrument(endpoint=sys.argv[1])  # the process's own provider, exporting to the collector
client = openai.OpenAI(base_url=sys.argv[2], api_key="test", max_retries=0)
client.chat.completions.create(model="agl-tiny", messages=[{"role": "user", "content": "what is 5 + 5?"}])
lightning_otel.flush()
"""


def test_an_instrumented_program_sends_the_event_record_beside_its_spans(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGL_"))}
    env |= {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}  # fmt: skip
    collector = EmbeddedCollector.on_sqlite_file(tmp_path / "store.sqlite3")
    addresses = collector.start()
    try:
        with OpenAITestServer() as server:
            done = subprocess.run([sys.executable, "-c", AGENT, addresses.otlp_http, server.base_url], env=env,
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
    finally:
        collector.stop()
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(tmp_path / "store.sqlite3") as db:
        [(raw,)] = db.execute("SELECT record FROM agl_logs").fetchall()
        [(span_name,)] = db.execute("SELECT name FROM agl_spans").fetchall()
    record = json.loads(raw)
    assert record["eventName"] == semconv.GEN_AI_CONTENT_EVENT and span_name.startswith("chat")
    assert "what is 5 + 5?" in json.dumps(record["attributes"][semconv.GEN_AI_INPUT_MESSAGES])
