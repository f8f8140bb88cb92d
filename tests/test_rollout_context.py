"""Rollout identity: stamped on every span, isolated between concurrent rollouts, carried across processes."""

from __future__ import annotations

import asyncio
import threading

import httpx
import openai
import pytest
import uvicorn
from fastapi import FastAPI
from opentelemetry import propagate
from opentelemetry.propagators.textmap import TextMapPropagator, default_setter

import lightning_otel
from lightning_otel import semconv
from lightning_otel.capture.propagation import inject_current
from tests.helpers import attrs


def test_every_span_inside_is_stamped_and_outside_is_not(agl_spans):
    tracer = lightning_otel.get_tracer()
    with lightning_otel.rollout_context("ro-9", "at-2"), tracer.start_as_current_span("framework step"):
        pass
    with tracer.start_as_current_span("outside"):
        pass
    inside, outside = agl_spans.spans
    assert (attrs(inside)[semconv.AGL_ROLLOUT_ID], attrs(inside)[semconv.AGL_ATTEMPT_ID]) == ("ro-9", "at-2")
    assert semconv.AGL_ROLLOUT_ID not in attrs(outside)
    assert lightning_otel.current_rollout() is None


async def test_200_concurrent_async_rollouts_never_mix(openai_test_server, agl_spans):
    client = openai.AsyncOpenAI(base_url=openai_test_server.base_url, api_key="t", max_retries=0)

    async def rollout(index: int) -> None:
        async with lightning_otel.rollout_context(f"ro-{index}", f"at-{index}"):
            with lightning_otel.agent(f"agent-{index}"):
                await asyncio.sleep(0.001 * (index % 7))
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"task {index}"}])
                lightning_otel.emit_reward(float(index))

    await asyncio.gather(*(rollout(i) for i in range(200)))
    spans = agl_spans.spans
    llm = agl_spans.llm_spans()
    assert len(llm) == 200 and len(agl_spans.reward_spans()) == 200
    tokenizer = openai_test_server.tokenizer
    for span in llm:
        a = attrs(span)
        index = int(a[semconv.AGL_ROLLOUT_ID].removeprefix("ro-"))
        assert a[semconv.AGL_ATTEMPT_ID] == f"at-{index}"
        assert a[semconv.GEN_AI_AGENT_NAME] == f"agent-{index}"
        # the prompt this span carries is the one this rollout sent
        assert tokenizer.decode(a[semconv.AGL_PROMPT_TOKEN_IDS]).count(f"task {index}<|im_end|>") == 1
    for span in agl_spans.reward_spans():
        a = attrs(span)
        assert a[semconv.AGL_ROLLOUT_ID] == f"ro-{int(a[semconv.AGL_REWARD_VALUE])}"
    assert all(semconv.AGL_ROLLOUT_ID in attrs(s) for s in spans)


def test_threads_that_copy_context_keep_the_rollout(agl_spans):
    import contextvars

    tracer = lightning_otel.get_tracer()
    results = []

    def work():
        with tracer.start_as_current_span("in thread"):
            results.append(lightning_otel.current_rollout())

    with lightning_otel.rollout_context("ro-t", "at-t"):
        thread = threading.Thread(target=contextvars.copy_context().run, args=(work,))
        thread.start()
        thread.join()
    assert results[0].rollout_id == "ro-t"
    assert attrs(agl_spans.named("in thread")[0])[semconv.AGL_ROLLOUT_ID] == "ro-t"


def test_rollout_context_rejects_empty_id_and_reentry():
    with pytest.raises(ValueError):
        lightning_otel.rollout_context("")
    scope = lightning_otel.rollout_context("ro-1")
    with scope, pytest.raises(RuntimeError):
        scope.__enter__()


@pytest.fixture
def agent_server(openai_test_server):
    """A FastAPI agent server in this process, on loopback, with our middleware: it calls the LLM itself."""
    app = FastAPI()
    app.add_middleware(lightning_otel.RolloutContextMiddleware)
    llm = openai.AsyncOpenAI(base_url=openai_test_server.base_url, api_key="t", max_retries=0)

    @app.post("/run")
    async def run(payload: dict) -> dict:
        seen = lightning_otel.current_rollout()
        with lightning_otel.agent("remote-agent"):
            await llm.chat.completions.create(model="m", messages=[{"role": "user", "content": payload["task"]}])
        return {"rollout": seen.rollout_id if seen else None, "attempt": seen.attempt_id if seen else None}

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(5)


def test_baggage_crosses_http_to_an_agent_server_and_back_into_its_spans(agent_server, agl_spans):
    tracer = lightning_otel.get_tracer()
    with (
        lightning_otel.rollout_context("ro-remote", "at-3"),
        tracer.start_as_current_span("caller") as caller,
    ):
        reply = httpx.post(f"{agent_server}/run", json={"task": "remote work"}).json()
    assert reply == {"rollout": "ro-remote", "attempt": "at-3"}
    llm = [s for s in agl_spans.llm_spans() if attrs(s).get(semconv.GEN_AI_AGENT_NAME) == "remote-agent"]
    assert len(llm) == 1
    assert attrs(llm[0])[semconv.AGL_ROLLOUT_ID] == "ro-remote"
    # the remote agent's spans continue the caller's trace
    assert llm[0].context.trace_id == caller.get_span_context().trace_id


def test_incoming_context_helper_for_plain_servers(agl_spans):
    headers = {"baggage": "agl.rollout.id=ro-plain,agl.attempt.id=at-1"}
    with lightning_otel.incoming_context(headers):
        assert lightning_otel.current_rollout() == lightning_otel.RolloutIdentity("ro-plain", "at-1")
        lightning_otel.emit_reward(0.5)
    assert attrs(agl_spans.reward_spans()[0])[semconv.AGL_ROLLOUT_ID] == "ro-plain"
    assert lightning_otel.current_rollout() is None


def test_llm_request_headers_match_the_global_propagator_and_follow_baggage_changes():
    tracer = lightning_otel.get_tracer()
    for rollout in ("ro-a", "ro-b", "ro-a"):
        with lightning_otel.rollout_context(rollout, "at-1"), tracer.start_as_current_span("call"):
            ours: dict[str, str] = {}
            inject_current(ours)
            assert ours == lightning_otel.outgoing_headers()
            assert f"agl.rollout.id={rollout}" in ours["baggage"]
    ours = {}
    inject_current(ours)
    assert ours == {}  # no span, no baggage: nothing to send


def test_llm_request_headers_follow_a_custom_global_propagator():
    class Custom(TextMapPropagator):
        def inject(self, carrier, context=None, setter=default_setter):
            setter.set(carrier, "x-custom", "1")

        def extract(self, carrier, context=None, getter=None):
            return context

        @property
        def fields(self):
            return {"x-custom"}

    previous = propagate.get_global_textmap()
    propagate.set_global_textmap(Custom())
    try:
        with lightning_otel.rollout_context("ro-c", "at-1"):
            ours: dict[str, str] = {}
            inject_current(ours)
    finally:
        propagate.set_global_textmap(previous)
    assert ours == {"x-custom": "1"}


def test_outgoing_headers_carry_rollout_as_baggage():
    with lightning_otel.rollout_context("ro-h", "at-h"):
        headers = lightning_otel.outgoing_headers()
    assert "agl.rollout.id=ro-h" in headers["baggage"]
    assert "agl.attempt.id=at-h" in headers["baggage"]
