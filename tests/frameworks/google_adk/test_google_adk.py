"""Google ADK through LiteLLM: ADK's native spans kept, one `chat` LLM span per call under the ADK agent with the
server's token ids (ADK's generate_content spans are not counted as LLM calls), rollout ids, no behaviour change."""

from __future__ import annotations

import lightning_otel
from lightning_otel.testing import OpenAITestServer, SpanCapture
from tests.frameworks.google_adk import programs
from tests.frameworks.span_tree import ancestors, assert_llm_spans_match_server, by_id, uninstrumented


async def test_coordinator_transfers_to_a_sub_agent_with_a_tool(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture
) -> None:
    openai_test_server.set_replies(programs.COORDINATOR_REPLIES)
    with lightning_otel.rollout_context("ro-adk", "at-1"):
        texts = await programs.run_coordinator(openai_test_server.base_url)
    assert texts == ["It is sunny in Paris."]
    assert_llm_spans_match_server(agl_spans, openai_test_server, ["coordinator", "weather", "weather"])
    spans = by_id(agl_spans)
    (tool,) = agl_spans.named("execute_tool get_weather")
    assert ancestors(tool, spans)[0] == "invoke_agent weather"
    assert len(agl_spans.where(lambda s: s.name.startswith("generate_content"))) == 3  # ADK's own, kept
    assert {s.attributes.get("agl.rollout.id") for s in agl_spans.spans} == {"ro-adk"}


async def test_sequential_writer_then_checker(openai_test_server: OpenAITestServer, agl_spans: SpanCapture) -> None:
    openai_test_server.set_replies(programs.PIPELINE_REPLIES)
    with lightning_otel.rollout_context("ro-seq", "at-1"):
        texts = await programs.run_pipeline(openai_test_server.base_url)
    assert texts == programs.PIPELINE_REPLIES
    assert_llm_spans_match_server(agl_spans, openai_test_server, ["writer", "checker"])
    writer = agl_spans.named("invoke_agent writer")[0]
    assert ancestors(writer, by_id(agl_spans))[0] == "invoke_agent pipeline"
    assert {s.attributes.get("agl.rollout.id") for s in agl_spans.spans} == {"ro-seq"}


async def test_uninstrumented_runs_give_the_same_outputs(openai_test_server: OpenAITestServer) -> None:
    async def run_both() -> list[list[str]]:
        openai_test_server.set_replies(programs.COORDINATOR_REPLIES + programs.PIPELINE_REPLIES)
        return [await programs.run_coordinator(openai_test_server.base_url),
                await programs.run_pipeline(openai_test_server.base_url)]  # fmt: skip

    instrumented = await run_both()
    with uninstrumented():
        plain = await run_both()
    assert plain == instrumented == [["It is sunny in Paris."], programs.PIPELINE_REPLIES]


async def test_the_latest_genai_conventions_name_the_run_a_conversation_turn_and_train_the_same(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture, monkeypatch
) -> None:
    from lightning_otel.adapters.triplets import TraceToTriplet
    from lightning_otel.capture.settings import settings
    from tests.frameworks.span_tree import flat_spans

    samples = {}
    for opted_in in (False, True):  # OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental, as instrument() reads it
        monkeypatch.setattr(settings, "latest_genai", opted_in)
        agl_spans.clear()
        openai_test_server.set_replies(programs.COORDINATOR_REPLIES)
        with lightning_otel.rollout_context(f"ro-semconv-{opted_in}", "at-1"):
            assert await programs.run_coordinator(openai_test_server.base_url) == ["It is sunny in Paris."]
        lightning_otel.flush()
        names = {s.name for s in agl_spans.spans}
        if opted_in:  # ADK's own entry span, renamed as the latest conventions name it
            (turn,) = agl_spans.named("handle_conversation_turn coordinator")
            assert turn.attributes["gen_ai.operation.name"] == "handle_conversation_turn"
            assert turn.attributes["gen_ai.invocation.is_nested"] is False
            assert "invoke_workflow coordinator" not in names
        else:
            assert "invoke_workflow coordinator" in names and not agl_spans.named(
                "handle_conversation_turn coordinator"
            )
        adapted = TraceToTriplet(agent_match="coordinator|weather").adapt(flat_spans(agl_spans))
        samples[opted_in] = [(t.agent_name, t.prompt_token_ids, t.response_token_ids) for t in adapted.triplets]
    assert len(samples[True]) == 3 and samples[True] == samples[False]  # the adapter reads both: the same samples


async def test_with_the_latest_conventions_an_image_the_agent_sends_is_a_generic_part(
    openai_test_server: OpenAITestServer, agl_spans: SpanCapture, monkeypatch
) -> None:
    """An image part of the user's message reaches the model (through LiteLLM) as chat's `image_url` block: a
    generic part opted in (#584), left out by default; the text part is a text part either way."""
    import json

    from google.adk.agents import LlmAgent
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    from lightning_otel.capture.settings import ContentCapture, settings

    monkeypatch.setattr(settings, "content", ContentCapture.SPAN_ONLY)  # message content on the spans
    pixel = bytes.fromhex("89504e470d0a1a0a")  # a PNG's signature: the server does not look at it
    parts = {}
    for opted_in in (False, True):
        monkeypatch.setattr(settings, "latest_genai", opted_in)
        agl_spans.clear()
        openai_test_server.set_replies(["A single pixel."])
        viewer = LlmAgent(name="viewer", model=programs.model(openai_test_server.base_url),
                          instruction="Describe pictures.")  # fmt: skip
        runner = InMemoryRunner(agent=viewer, app_name="agl-tests")
        session = await runner.session_service.create_session(app_name="agl-tests", user_id="user")
        picture = types.Part.from_bytes(data=pixel, mime_type="image/png")
        message = types.Content(role="user", parts=[types.Part(text="What is in this picture?"), picture])
        with lightning_otel.rollout_context(f"ro-image-{opted_in}", "at-1"):
            async for _ in runner.run_async(user_id="user", session_id=session.id, new_message=message):
                pass
        lightning_otel.flush()
        (call,) = agl_spans.where(lambda s: (s.attributes or {}).get("gen_ai.operation.name") == "chat")
        messages = json.loads(call.attributes["gen_ai.input.messages"])
        parts[opted_in] = [part for m in messages if m["role"] == "user" for part in m["parts"]]
    assert parts[False] == [{"type": "text", "content": "What is in this picture?"}]
    (generic,) = [p for p in parts[True] if p["type"] == "generic"]
    assert generic["generic_type"] == "image_url" and generic["image_url"]["url"].startswith("data:image/png;base64,")
    assert {"type": "text", "content": "What is in this picture?"} in parts[True]
