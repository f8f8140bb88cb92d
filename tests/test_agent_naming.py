"""`gen_ai.agent.name` on every LLM span that has an agent."""

from __future__ import annotations

import openai
import pytest

import lightning_otel
from lightning_otel import semconv
from lightning_otel.capture.agent_naming import register_agent_name_source, unregister_agent_name_source
from tests.helpers import attrs

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def client(openai_test_server):
    return openai.OpenAI(base_url=openai_test_server.base_url, api_key="t", max_retries=0)


def test_decorator_names_calls_and_opens_an_agent_span(client, agl_spans):
    @lightning_otel.agent("writer")
    def write():
        return client.chat.completions.create(model="m", messages=MESSAGES)

    @lightning_otel.agent("checker")
    async def check():
        return None

    write()
    (llm,) = agl_spans.llm_spans()
    (agent_span,) = agl_spans.agent_spans()
    assert agent_span.name == "invoke_agent writer"
    assert attrs(agent_span)[semconv.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert attrs(llm)[semconv.GEN_AI_AGENT_NAME] == "writer"
    assert llm.parent.span_id == agent_span.context.span_id


async def test_async_decorator_and_nesting(client, agl_spans):
    @lightning_otel.agent("inner")
    async def inner():
        client.chat.completions.create(model="m", messages=MESSAGES)

    async with lightning_otel.agent("outer"):
        client.chat.completions.create(model="m", messages=MESSAGES)
        await inner()
        client.chat.completions.create(model="m", messages=MESSAGES)
    names = [attrs(s)[semconv.GEN_AI_AGENT_NAME] for s in agl_spans.llm_spans()]
    assert names == ["outer", "inner", "outer"]


def test_nearest_ancestor_agent_span_names_the_call(client, agl_spans):
    """A framework's own agent span (ADK, AutoGen: `invoke_agent X`, attribute set later) names nested calls."""
    tracer = lightning_otel.get_tracer()
    with tracer.start_as_current_span("invoke_agent planner"), tracer.start_as_current_span("step"):
        client.chat.completions.create(model="m", messages=MESSAGES)
    with tracer.start_as_current_span(
        "invoke_agent",
        attributes={semconv.GEN_AI_OPERATION_NAME: "invoke_agent", semconv.GEN_AI_AGENT_NAME: "solver"},
    ):
        client.chat.completions.create(model="m", messages=MESSAGES)
    client.chat.completions.create(model="m", messages=MESSAGES)
    first, second, third = agl_spans.llm_spans()
    assert attrs(first)[semconv.GEN_AI_AGENT_NAME] == "planner"
    assert attrs(second)[semconv.GEN_AI_AGENT_NAME] == "solver"
    assert semconv.GEN_AI_AGENT_NAME not in attrs(third)


def test_registered_source_ranks_between_explicit_and_ancestry(client, agl_spans):
    def source():
        return "from-framework"

    register_agent_name_source(source)
    try:
        tracer = lightning_otel.get_tracer()
        with tracer.start_as_current_span("invoke_agent ancestor"):
            client.chat.completions.create(model="m", messages=MESSAGES)
        with lightning_otel.agent("explicit"):
            client.chat.completions.create(model="m", messages=MESSAGES)
    finally:
        unregister_agent_name_source(source)
    names = [attrs(s)[semconv.GEN_AI_AGENT_NAME] for s in agl_spans.llm_spans()]
    assert names == ["from-framework", "explicit"]


def test_agent_error_is_recorded_and_reraised(agl_spans):
    with pytest.raises(ZeroDivisionError), lightning_otel.agent("fragile"):
        1 / 0  # noqa: B018
    (span,) = agl_spans.agent_spans()
    assert span.status.status_code.name == "ERROR"
    assert attrs(span)[semconv.ERROR_TYPE] == "ZeroDivisionError"


def test_one_agent_object_entered_by_concurrent_tasks(client, agl_spans):
    import asyncio

    writer = lightning_otel.agent("shared")

    async def use(index: int) -> None:
        async with writer:
            await asyncio.sleep(0.001 * (index % 3))

    async def main() -> None:
        await asyncio.gather(*(use(i) for i in range(20)))

    asyncio.run(main())
    assert len(agl_spans.agent_spans()) == 20
