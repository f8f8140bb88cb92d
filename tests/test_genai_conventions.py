"""The GenAI conventions switch (`OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`, `capture.conventions`):
a framework's runner entry span becomes a conversation turn, content blocks no part fits become generic parts,
content `true` records the operation-details event too; without the switch nothing changes. The framework lanes
(OpenAI Agents, Google ADK) check the same on their real runs, and that the adapter trains the same samples."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lightning_otel import semconv
from lightning_otel.capture.conventions import ConversationTurnProcessor, latest_genai
from lightning_otel.capture.message_content import input_messages
from lightning_otel.capture.settings import CaptureSettings, ContentCapture, settings


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
