"""The policy gateway: sticky routing, enforced sampling, token ids always, streams passed through with their ids,
503 while paused, held (not refused) and drained around a weight swap, its own LLM span attributed by headers or
by the URL path, one sample when the client's
instrumentor records the same call."""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import time
from typing import Any

import httpx
import openai
import pytest

import lightning_otel
from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.serving.gateway import GatewayServer, PolicyGateway
from lightning_otel.testing import OpenAITestServer, SpanCapture


@pytest.fixture
def replicas():
    with OpenAITestServer() as first, OpenAITestServer() as second:
        yield first, second


def chat(base_url: str, text: str, **extra: object) -> httpx.Response:
    body = {"model": "agl-tiny", "messages": [{"role": "user", "content": text}], **extra}
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=30)


def served_by(replicas: tuple[OpenAITestServer, ...], response_id: str) -> OpenAITestServer:
    (server,) = [s for s in replicas if response_id in s.served]
    return server


def test_rollouts_stick_to_one_replica_and_spread_across_them(replicas, agl_spans: SpanCapture) -> None:
    gateway = PolicyGateway([r.base_url for r in replicas])
    with GatewayServer(gateway) as server:
        homes: dict[str, set[int]] = {}
        for rollout in range(12):
            proxy = lightning_otel.ProxyLLM(server.base_url, "agl-tiny").get_base_url(f"ro-{rollout}", "at-1")
            for turn in range(3):
                reply = chat(proxy, f"turn {turn}").json()
                homes.setdefault(f"ro-{rollout}", set()).add(replicas.index(served_by(replicas, reply["id"])))
    assert all(len(home) == 1 for home in homes.values())  # sticky: one replica per rollout
    assert {next(iter(home)) for home in homes.values()} == {0, 1}  # and both replicas get rollouts


def test_sampling_is_enforced_and_token_ids_always_requested(replicas, agl_spans: SpanCapture) -> None:
    gateway = PolicyGateway(
        [replicas[0].base_url],
        sampling={"temperature": 1.0, "top_p": 1.0},
        validation_sampling={"temperature": 0.0},
        model="/models/policy",  # what the replicas serve (vLLM: the model's local path), whatever agents send
    )
    with GatewayServer(gateway) as server:
        reply = chat(server.base_url, "hi", temperature=0.2).json()
        gateway.set_mode("val")
        chat(server.base_url, "hi", temperature=0.7)
    train_body, val_body = (r.body for r in replicas[0].requests)
    assert (train_body["temperature"], train_body["top_p"], val_body["temperature"]) == (1.0, 1.0, 0.0)
    assert train_body["model"] == val_body["model"] == "/models/policy"
    for body in (train_body, val_body):
        assert (body["return_token_ids"], body["logprobs"], body["top_logprobs"]) == (True, True, 0)
    assert reply["prompt_token_ids"] == replicas[0].served[reply["id"]].prompt_token_ids  # passed through as sent


def test_the_reply_budget_is_a_cap_an_agent_asking_fewer_tokens_gets_fewer(replicas, agl_spans: SpanCapture) -> None:
    gateway = PolicyGateway([replicas[0].base_url], sampling={"temperature": 1.0, "max_tokens": 64},
                            validation_sampling={"temperature": 0.0, "max_tokens": 64})  # fmt: skip
    with GatewayServer(gateway) as server:
        chat(server.base_url, "hi", max_tokens=12)  # the agent's own budget, under the run's
        chat(server.base_url, "hi", max_tokens=500)  # over it: the run's
        chat(server.base_url, "hi")  # none: the run's
        chat(server.base_url, "hi", max_completion_tokens=20)  # the newer spelling, kept in step
    bodies = [request.body for request in replicas[0].requests]
    assert [body["max_tokens"] for body in bodies] == [12, 64, 64, 20]
    assert bodies[3]["max_completion_tokens"] == 20 and "max_completion_tokens" not in bodies[0]


def test_the_gateway_span_has_the_servers_ids_and_the_rollout_from_the_path(replicas, agl_spans: SpanCapture) -> None:
    gateway = PolicyGateway([replicas[0].base_url])
    with GatewayServer(gateway) as server:
        proxy = lightning_otel.ProxyLLM(server.base_url, "agl-tiny").get_base_url("ro-path", "at-2")
        reply = chat(proxy, "no headers at all").json()  # an uninstrumented client in any language
    lightning_otel.flush()
    (span,) = agl_spans.llm_spans()
    served = replicas[0].served[reply["id"]]
    assert list(span.attributes["agl.llm.prompt_token_ids"]) == served.prompt_token_ids
    assert list(span.attributes["agl.llm.response_token_ids"]) == served.response_token_ids[0]
    assert span.attributes["agl.llm.token_ids_complete"] is True
    assert (span.attributes["agl.rollout.id"], span.attributes["agl.attempt.id"]) == ("ro-path", "at-2")


def test_a_bare_client_names_its_agent_with_a_header_and_agent_match_selects_it(
    replicas, agl_spans: SpanCapture
) -> None:
    gateway = PolicyGateway([replicas[0].base_url])
    with GatewayServer(gateway) as server:
        proxy = lightning_otel.ProxyLLM(server.base_url, "agl-tiny").get_base_url("ro-named", "at-1")
        body = {"model": "agl-tiny", "messages": [{"role": "user", "content": "2+2?"}]}
        for name in ("solver", "", None):  # named, empty (ignored), unnamed
            headers = {"x-agl-agent-name": name} if name is not None else {}
            httpx.post(f"{proxy}/chat/completions", json=body, headers=headers, timeout=30).raise_for_status()
    lightning_otel.flush()
    names = [span.attributes.get("gen_ai.agent.name") for span in agl_spans.llm_spans()]
    assert names == ["solver", None, None]
    flat = [{"spanId": f"{s.context.span_id:016x}", "startTimeUnixNano": s.start_time, "name": s.name,
             "attributes": dict(s.attributes)} for s in agl_spans.llm_spans()]  # fmt: skip
    adapted = TraceToTriplet(agent_match="^solver$").adapt(flat)
    assert [t.agent_name for t in adapted.triplets] == ["solver"]


def test_streams_pass_through_with_their_ids(replicas, agl_spans: SpanCapture) -> None:
    gateway = PolicyGateway([replicas[0].base_url])
    with GatewayServer(gateway) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0)
        lightning_otel.uninstrument()  # the gateway's span alone: an uninstrumented streaming client
        try:
            messages = [{"role": "user", "content": "stream me"}]
            chunks = list(client.chat.completions.create(model="agl-tiny", stream=True, messages=messages))
        finally:
            lightning_otel.instrument()
    lightning_otel.flush()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "You said: stream me"
    (span,) = [s for s in agl_spans.llm_spans() if s.attributes.get("gen_ai.response.id") == chunks[0].id]
    served = replicas[0].served[chunks[0].id]
    assert list(span.attributes["agl.llm.response_token_ids"]) == served.response_token_ids[0]
    assert list(span.attributes["agl.llm.prompt_token_ids"]) == served.prompt_token_ids


def test_paused_gateway_answers_503_with_retry_after(replicas, agl_spans: SpanCapture) -> None:
    gateway = PolicyGateway([replicas[0].base_url])
    with GatewayServer(gateway) as server:
        gateway.pause()
        refused = chat(server.base_url, "hi")
        gateway.resume()
        accepted = chat(server.base_url, "hi")
    assert (refused.status_code, refused.headers["retry-after"]) == (503, "1")
    assert "being updated" in refused.json()["error"]["message"]
    assert accepted.status_code == 200
    assert len(replicas[0].requests) == 1


def test_bad_input_and_dead_replicas_get_clear_errors(agl_spans: SpanCapture) -> None:
    gateway = PolicyGateway(["http://127.0.0.1:9/v1"])
    with GatewayServer(gateway) as server:
        bad = httpx.post(f"{server.base_url}/chat/completions", content=b"{not json", timeout=10)
        dead = chat(server.base_url, "hi")
    assert bad.status_code == 400 and "invalid JSON" in bad.json()["error"]["message"]
    assert dead.status_code == 502 and "unreachable" in dead.json()["error"]["message"]


def test_client_and_gateway_spans_of_one_call_become_one_sample(replicas, agl_spans: SpanCapture) -> None:
    gateway = PolicyGateway([replicas[0].base_url])
    with GatewayServer(gateway) as server:
        lightning_otel.register_trainable_endpoint(server.base_url)
        client = openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0)
        with lightning_otel.rollout_context("ro-both", "at-1"), lightning_otel.agent("write"):
            reply = client.chat.completions.create(model="agl-tiny", messages=[{"role": "user", "content": "q"}])
    lightning_otel.flush()
    spans = agl_spans.llm_spans()
    assert len(spans) == 2 and {s.attributes["gen_ai.response.id"] for s in spans} == {reply.id}
    gateway_span = min(spans, key=lambda s: s.start_time)  # started second, ended first: find it by parentage
    gateway_span = next(
        s for s in spans if s.parent is not None and s.parent.span_id in {o.context.span_id for o in spans}
    )
    assert gateway_span.attributes["agl.rollout.id"] == "ro-both"  # attributed through the client's baggage
    flat = [
        {"spanId": f"{s.context.span_id:016x}", "startTimeUnixNano": s.start_time, "name": s.name,
         "attributes": dict(s.attributes)}
        for s in sorted(spans, key=lambda s: s.end_time)  # the gateway's copy reaches the store first
    ]  # fmt: skip
    adapted = TraceToTriplet(agent_match="^write$").adapt(flat)
    assert len(adapted.triplets) == 1 and adapted.triplets[0].agent_name == "write"
    assert adapted.diagnostics.duplicate_calls == 1


def test_a_proxy_llms_rollout_paths_are_trainable_endpoints() -> None:
    from lightning_otel.agent_api.resources import llm_endpoints
    from lightning_otel.capture.settings import CaptureSettings

    proxy = lightning_otel.ProxyLLM("http://gw:9/v1", "policy")
    settings = CaptureSettings()
    for endpoint in llm_endpoints({"main_llm": proxy, "plain": lightning_otel.LLM("http://vllm:8000/v1", "m")}):
        settings.register_trainable_endpoint(endpoint)
    assert settings.wants_token_ids(proxy.get_base_url("ro-1", "at-1") + "/chat/completions")  # the path form
    assert settings.wants_token_ids("http://gw:9/v1/chat/completions")
    assert settings.wants_token_ids("http://vllm:8000/v1/chat/completions")
    assert not settings.wants_token_ids("http://elsewhere:9/v1/chat/completions")


class GatewayBaseline(lightning_otel.Algorithm):
    """A Baseline behind a policy gateway whose spans are exported in batches (5 s by default), as VERL runs it."""

    def __init__(self, replica: str, *, flush_before_read: bool) -> None:
        self.replica = replica
        self.flush_before_read = flush_before_read

    def run(self, run, train_dataset, val_dataset=None):  # type: ignore[no-untyped-def]
        from lightning_otel.serving.collector_tracer import collector_tracer

        with collector_tracer(run.client) as spans:
            if self.flush_before_read:
                run.add_span_source(spans.flush)
            with GatewayServer(PolicyGateway([self.replica], tracer=spans.tracer)) as server:
                run.update_resources({"main_llm": lightning_otel.ProxyLLM(server.base_url, "agl-tiny")})
                return run.collect(run.submit(list(train_dataset), n=2))


@pytest.mark.parametrize("flush_before_read", [True, False])
def test_a_bare_agents_calls_are_all_read_although_the_gateway_exports_in_batches(
    flush_before_read: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_otel.testing.runtime_agents import bare_http_agent

    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # the gateway's batches leave after a minute, or on flush

    with OpenAITestServer() as replica:
        trainer = lightning_otel.Trainer(
            n_runners=1,
            algorithm=GatewayBaseline(replica.base_url, flush_before_read=flush_before_read),
            adapter={"agent_match": "^solver$"},
            progress=False,
        )
        batch = trainer.fit(bare_http_agent, [{"question": "q1"}, {"question": "q2"}])
    served = len(replica.served)
    assert served == 8  # 2 tasks x 2 rollouts x 2 calls
    triplets = batch.triplets()
    if flush_before_read:  # every served call is a sample, with the replica's ids and the header's agent
        assert len(triplets) == served and {t.agent_name for t in triplets} == {"solver"}
        assert {t.response_ids[0] for t in triplets} == set(replica.served)
    else:  # what happened before: the rollouts were read before the gateway's batch left, no sample at all
        assert triplets == []


class _VersionedStreamingReplica:
    """A replica that streams slowly and names, in every chunk, the version its weights have at that moment: a swap
    during a stream would show as two versions in one response (what the gateway's hold must prevent)."""

    def __init__(self) -> None:
        self.version = 0

    def app(self) -> Any:
        import asyncio

        from starlette.applications import Starlette
        from starlette.responses import StreamingResponse
        from starlette.routing import Route

        async def chat(request: Any) -> Any:
            async def events() -> Any:
                for index in range(8):
                    delta = {"index": 0, "delta": {"content": f"w{index} "}, "finish_reason": None}
                    chunk = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "choices": [delta],
                             "agl_policy_version": self.version}  # fmt: skip
                    yield f"data: {json.dumps(chunk)}\n\n"
                    await asyncio.sleep(0.05)
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _stream_versions(base_url: str) -> list[int]:
    body = {"model": "agl-tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    versions = []
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                versions.append(json.loads(line[6:])["agl_policy_version"])
    return versions


def test_a_weight_swap_under_hold_waits_for_streams_in_flight_and_holds_new_requests(agl_spans: SpanCapture) -> None:
    from lightning_otel.serving.app_server import AppServer

    replica = _VersionedStreamingReplica()
    with AppServer(replica.app(), host="127.0.0.1", port=0, name="versioned-replica") as upstream:
        gateway = PolicyGateway([f"http://127.0.0.1:{upstream.port}/v1"])
        with GatewayServer(gateway) as server, concurrent.futures.ThreadPoolExecutor(2) as pool:
            first = pool.submit(_stream_versions, server.base_url)
            time.sleep(0.15)  # the first stream is under way
            with gateway.held() as in_flight:
                swapped_at = time.monotonic()
                second = pool.submit(_stream_versions, server.base_url)  # arrives during the swap: waits
                time.sleep(0.3)
                replica.version += 1
            assert in_flight == 1
            before, after = first.result(30), second.result(30)
    assert before == [0] * 8  # drained: it finished on the old weights before the swap began
    assert after == [1] * 8  # held, then served wholly by the new weights
    assert gateway.pause_s_total >= 0.3 and time.monotonic() - swapped_at >= 0.3


def test_validation_rollouts_get_validation_sampling_beside_training_ones(replicas, agl_spans: SpanCapture) -> None:
    """Asynchronous training validates while training rollouts run: sampling is chosen per rollout, not by a mode."""
    gateway = PolicyGateway(
        [replicas[0].base_url], sampling={"temperature": 1.0}, validation_sampling={"temperature": 0.0}
    )
    with GatewayServer(gateway) as server:
        proxy = lightning_otel.ProxyLLM(server.base_url, "agl-tiny")
        gateway.validate_rollouts(["ro-val"])
        chat(proxy.get_base_url("ro-val", "at-1"), "validating")
        chat(proxy.get_base_url("ro-train", "at-1"), "training")
        gateway.validate_rollouts(["ro-val"], done=True)
        chat(proxy.get_base_url("ro-val", "at-2"), "after")
    assert [r.body["temperature"] for r in replicas[0].requests] == [0.0, 1.0, 1.0]


def test_streams_left_early_are_not_counted_in_flight_forever(agl_spans: SpanCapture) -> None:
    """A hold waits for the requests in flight: a stream whose client left (early, or before its body started) must
    leave the count, or every later weight swap would wait out the drain timeout."""
    import gc

    from lightning_otel.serving.app_server import AppServer

    replica = _VersionedStreamingReplica()
    with AppServer(replica.app(), host="127.0.0.1", port=0, name="versioned-replica") as upstream:
        gateway = PolicyGateway([f"http://127.0.0.1:{upstream.port}/v1"])
        with GatewayServer(gateway) as server:
            body = {"model": "agl-tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            for _ in range(4):
                with httpx.stream("POST", f"{server.base_url}/chat/completions", json=body, timeout=30) as response:
                    next(response.iter_lines())  # the first chunk, then gone
            deadline = time.monotonic() + 10
            while gateway.hold._in_flight and time.monotonic() < deadline:
                gc.collect()
                time.sleep(0.05)
            assert gateway.hold._in_flight == 0
            with gateway.held() as in_flight:  # so a hold now starts at once
                assert in_flight == 0
    assert gateway.pause_s_total < 1.0


def test_every_new_provider_stamps_rollout_ids_even_at_a_dead_providers_address() -> None:
    # Each training run's gateway makes a provider of its own and drops it after the run; CPython hands a dropped
    # object's address to the next one. Keyed by id(), the registry took the new provider for the old one and left it
    # without our processors: the gateway's spans lost their rollout ids (a bare agent's calls all went unread).
    import gc

    from opentelemetry import context as otel_context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from lightning_otel import semconv
    from lightning_otel.capture.rollout_context import context_with_rollout
    from lightning_otel.capture.setup import ensure_span_processors

    addresses = set()
    for index in itertools.count():
        provider = TracerProvider()
        exported = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exported))
        assert ensure_span_processors(provider)
        token = otel_context.attach(context_with_rollout(f"ro-{index}", "at-1"))
        try:
            provider.get_tracer("test").start_span("call").end()
        finally:
            otel_context.detach(token)
        (span,) = exported.get_finished_spans()
        assert span.attributes[semconv.AGL_ROLLOUT_ID] == f"ro-{index}", f"provider {index} was not stamping"
        addresses.add(id(provider))
        provider.shutdown()
        del provider, exported, span
        gc.collect()
        if index + 1 >= 40 and len(addresses) <= index:  # 40 made, and an address came back: the case happened
            break
        assert index < 400, "no provider's address was reused: the case this test is about never happened"
