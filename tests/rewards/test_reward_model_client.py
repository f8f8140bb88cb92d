"""RewardModelClient against the real service: concurrent score_one calls share requests; timeouts and 5xx are
retried with the same request id (so a response lost on the way is not scored twice); 4xx is never retried.
score_answer records the scoring span and a sourced reward the adapter gives to the judged call."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import lightning_otel
from lightning_otel import semconv
from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.rewards.client import RewardModelClient, RewardModelError
from lightning_otel.rewards.scoring import score_answer, weighted_reward
from lightning_otel.serving.app_server import AppServer
from tests.helpers import attrs
from tests.rewards.conftest import API_KEY


def conversation(question: str, answer: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def text_stats(service: str) -> dict[str, int]:
    return httpx.get(service + "/healthz").json()["batches"].get("text", {"requests": 0, "items": 0})


def test_concurrent_score_one_calls_share_requests(service: str, scorer) -> None:
    questions = [conversation(f"q{i}", f"answer number {i}") for i in range(20)]

    async def run() -> list[float]:
        async with RewardModelClient(service, api_key=API_KEY, max_wait_s=0.02) as client:
            return await asyncio.gather(*(client.score_one(q) for q in questions))

    assert asyncio.run(run()) == pytest.approx([scorer.score([q])[0] for q in questions], abs=1e-4)
    stats = text_stats(service)
    assert stats["items"] == 20 and stats["requests"] <= 3, stats  # 20 calls, a few HTTP requests


class Flaky:
    """Loopback proxy in front of the service: the first try of each request id fails as told."""

    def __init__(self, service: str, failure: str) -> None:
        self.service, self.failure, self.seen = service, failure, {}

    async def handle(self, request: Request) -> Response:
        request_id = request.headers.get("x-request-id", "")
        self.seen[request_id] = self.seen.get(request_id, 0) + 1
        first = self.seen[request_id] == 1
        if self.failure == "503-always" or (first and self.failure == "503"):
            return JSONResponse({"error": {"message": "busy", "code": 503}}, status_code=503)
        async with httpx.AsyncClient(timeout=60) as http:
            upstream = await http.post(
                self.service + request.url.path,
                content=await request.body(),
                headers={k: v for k, v in request.headers.items() if k != "host"},
            )
        if first and self.failure == "slow":  # the service scored it; the answer arrives too late
            await asyncio.sleep(1.5)
        return Response(upstream.content, status_code=upstream.status_code, media_type="application/json")


@pytest.fixture
def flaky(service: str, request: pytest.FixtureRequest) -> Iterator[tuple[str, Flaky]]:
    proxy = Flaky(service, request.param)
    app = Starlette(routes=[Route("/{path:path}", proxy.handle, methods=["POST"])])
    with AppServer(app, name="flaky-proxy") as server:
        yield f"http://{server.host}:{server.port}", proxy


@pytest.mark.parametrize("flaky", ["503", "slow"], indirect=True)
def test_timeouts_and_5xx_are_retried_with_the_same_request_id(flaky: Any, service: str) -> None:
    url, proxy = flaky

    async def run() -> tuple[list[float], int]:
        async with RewardModelClient(url, api_key=API_KEY, model="tiny-rm", timeout_s=0.5, backoff_s=0.01) as client:
            return await client.score([conversation("q", "a"), conversation("q", "b")]), client.retries

    scores, retries = asyncio.run(run())
    assert len(scores) == 2 and retries == 1
    assert list(proxy.seen.values()) == [2]  # one request id, tried twice
    assert text_stats(service)["requests"] == 1  # "slow": the retry was answered from memory, not scored again


@pytest.mark.parametrize("flaky", ["503-always"], indirect=True)
def test_retries_are_bounded(flaky: Any) -> None:
    url, proxy = flaky

    async def run() -> None:
        async with RewardModelClient(url, model="tiny-rm", max_retries=2, backoff_s=0.01) as client:
            await client.score([conversation("q", "a")])

    with pytest.raises(RewardModelError, match="failed after 3 tries: HTTP 503"):
        asyncio.run(run())
    assert list(proxy.seen.values()) == [3]


def test_a_4xx_is_never_retried(service: str) -> None:
    async def run() -> RewardModelClient:
        client = RewardModelClient(service, api_key=API_KEY, model="not-served", backoff_s=0.01)
        with pytest.raises(RewardModelError, match=r"refused the request \(400\): this service serves"):
            await client.score([conversation("q", "a")])
        await client.aclose()
        return client

    assert asyncio.run(run()).retries == 0
    assert text_stats(service)["requests"] == 0


def test_score_answer_records_where_the_reward_came_from(service: str, agl_spans) -> None:
    async def run() -> float:
        async with RewardModelClient(service, api_key=API_KEY) as judge:
            with lightning_otel.rollout_context("ro-rm", "at-1"):
                return await score_answer(judge, conversation("q", "a"), response_id="chatcmpl-7")

    value = asyncio.run(run())
    (scoring,) = [s for s in agl_spans.spans if s.name == "score tiny-rm"]
    (reward,) = agl_spans.reward_spans()
    assert attrs(scoring)[semconv.AGL_REWARD_MODEL_URL] == service
    assert attrs(scoring)[semconv.AGL_REWARD_RESPONSE_ID] == "chatcmpl-7"
    assert len(attrs(scoring)[semconv.AGL_REWARD_MODEL_VERSION]) == 12
    assert attrs(scoring)[semconv.AGL_REWARD_MODEL_SCORE] == pytest.approx(value)
    assert reward.parent.span_id == scoring.context.span_id  # the reward sits inside the call that produced it
    assert attrs(reward)[semconv.AGL_REWARD_VALUE] == pytest.approx(value)
    assert attrs(reward)[semconv.AGL_REWARD_NAME] == "reward_model"
    assert attrs(reward)[semconv.AGL_REWARD_SOURCE] == "tiny-rm"
    assert attrs(reward)[semconv.AGL_REWARD_RESPONSE_ID] == "chatcmpl-7"


def test_weighted_reward_keeps_its_parts_and_the_adapter_rewards_the_judged_call(agl_spans) -> None:
    with lightning_otel.rollout_context("ro-w", "at-1"):
        total = weighted_reward(
            {"execution": 1.0, "reward_model": 0.4},
            {"execution": 0.5, "reward_model": 1.0},
            sources={"reward_model": "tiny-rm", "execution": "sqlite"},
            response_id="chatcmpl-9",
        )
    assert total == pytest.approx(0.9)
    rewards = {attrs(s)[semconv.AGL_REWARD_NAME]: attrs(s) for s in agl_spans.reward_spans()}
    assert rewards["primary"][semconv.AGL_REWARD_VALUE] == pytest.approx(0.9)
    assert rewards["primary"][semconv.AGL_REWARD_SOURCE] == "weighted:execution*0.5,reward_model*1"
    assert rewards["reward_model"][semconv.AGL_REWARD_SOURCE] == "tiny-rm"
    call = {
        "spanId": "c1",
        "name": "chat m",
        "startTimeUnixNano": 1,
        "attributes": {
            semconv.GEN_AI_OPERATION_NAME: "chat",
            semconv.GEN_AI_RESPONSE_ID: "chatcmpl-9",
            semconv.AGL_PROMPT_TOKEN_IDS: [1],
            semconv.AGL_RESPONSE_TOKEN_IDS: [2],
        },
    }
    flat = [
        {"spanId": f"r{i}", "name": semconv.REWARD_SPAN_NAME, "startTimeUnixNano": 0, "attributes": attrs(s)}
        for i, s in enumerate(agl_spans.reward_spans())
    ]
    (triplet,) = TraceToTriplet().adapt([call, *flat]).triplets
    assert triplet.reward == pytest.approx(0.9) and triplet.rewards["reward_model"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="no weight for the reward part"):
        weighted_reward({"execution": 1.0, "style": 0.1}, {"execution": 1.0})
