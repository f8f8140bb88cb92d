"""`HttpAgent`: an agent that runs as an HTTP service, trained through the trainer's gateway. The service here is a
real server on loopback that calls the policy with raw HTTP (nothing of ours in it) and answers with a reward."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import lightning_otel
from lightning_otel.serving.app_server import AppServer
from lightning_otel.testing import OpenAITestServer


def service_app(seen: list[dict[str, Any]]) -> Starlette:
    async def chat(request: Request) -> Response:
        body = await request.json()
        seen.append({"body": body, "traceparent": request.headers.get("traceparent")})
        task = body["task"]
        if task.get("fail"):
            return JSONResponse({"error": "the agent crashed"}, status_code=500)
        llm = body["llm"]
        async with httpx.AsyncClient(timeout=30) as client:
            for turn in range(2):
                messages = [{"role": "user", "content": f"{task['question']} {turn}"}]
                reply = await client.post(f"{llm['base_url']}/chat/completions",
                                          json={"model": llm["model"], "messages": messages},
                                          headers={"x-agl-agent-name": "solver"})  # fmt: skip
                reply.raise_for_status()
        return JSONResponse({"reward": "high" if task.get("bad_reward") else 0.5})

    return Starlette(routes=[Route("/chat", chat, methods=["POST"])])


def test_a_service_agent_trains_through_the_gateway_and_its_errors_fail_attempts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen: list[dict[str, Any]] = []
    tasks = [{"id": "ok", "question": "q1"}, {"id": "crash", "question": "q2", "fail": True},
             {"id": "bad", "question": "q3", "bad_reward": True}]  # fmt: skip
    with OpenAITestServer() as policy, AppServer(service_app(seen)) as service:
        agent = lightning_otel.HttpAgent(f"http://{service.host}:{service.port}/chat")
        trainer = lightning_otel.Trainer(
            n_runners=1,
            adapter={"agent_match": "^solver$"},
            initial_resources={"main_llm": lightning_otel.LLM(policy.base_url, "agl-tiny")},
            settings=lightning_otel.RunSettings(max_attempts=1),
        )
        result = trainer.dev(agent, tasks, gateway=True)
    (batch,) = result.train
    records = {record["task_id"]: record for record in batch.rollouts}
    assert records["ok"]["status"] == "succeeded" and batch.rewards()[records["ok"]["rollout_id"]] == 0.5
    samples = batch.adapted[records["ok"]["rollout_id"]].triplets
    assert len(samples) == 2 and {t.agent_name for t in samples} == {"solver"}  # the bad-reward rollout: failed
    assert records["crash"]["status"] == "failed" and "answered HTTP 500" in records["crash"]["error"]
    assert records["bad"]["status"] == "failed" and "'reward' must be a number or null" in records["bad"]["error"]
    ok = next(s for s in seen if s["body"]["task"]["id"] == "ok")
    assert ok["body"]["rollout_id"] == records["ok"]["rollout_id"]
    assert f"/rollout/{records['ok']['rollout_id']}/" in ok["body"]["llm"]["base_url"]  # the gateway's rollout path
    assert ok["traceparent"]  # the service can join the rollout's trace
    assert "samples 2" in capsys.readouterr().out


def notified_service_app(notify_file: str) -> Starlette:
    """The recipe's service: it learns the policy's address from the notify file, not from the request, and
    forwards the request's trace headers on its LLM calls (the recipe's trace-id header)."""

    async def chat(request: Request) -> Response:
        address = lightning_otel.get_llm_server_address(notify_file)
        forwarded = {k: v for k, v in request.headers.items() if k in ("traceparent", "baggage")}
        async with httpx.AsyncClient(timeout=30) as client:
            reply = await client.post(f"http://{address}/v1/chat/completions",
                                      json={"model": "any", "messages": [{"role": "user", "content": "hi"}]},
                                      headers={**forwarded, "x-agl-agent-name": "solver"})  # fmt: skip
            reply.raise_for_status()
        return JSONResponse({"reward": 1.0})

    return Starlette(routes=[Route("/chat", chat, methods=["POST"])])


def test_a_service_finds_the_policy_through_the_notify_file(tmp_path) -> None:
    notify_file = tmp_path / "llm_server.json"
    with pytest.raises(lightning_otel.PolicyAddressUnavailable, match="does not exist"):
        lightning_otel.read_policy_address(notify_file)
    with OpenAITestServer() as policy, AppServer(notified_service_app(str(notify_file))) as service:
        trainer = lightning_otel.Trainer(
            n_runners=1,
            adapter={"agent_match": "^solver$"},
            initial_resources={"main_llm": lightning_otel.LLM(policy.base_url, "agl-tiny")},
            settings=lightning_otel.RunSettings(policy_notify_file=notify_file, max_attempts=1),
        )
        tasks = [{"id": "a"}, {"id": "b"}]
        result = trainer.dev(
            lightning_otel.HttpAgent(f"http://{service.host}:{service.port}/chat"), tasks, gateway=True
        )
    (batch,) = result.train
    assert batch.metrics()["succeeded"] == 2
    assert [len(adapted.triplets) for adapted in batch.adapted.values()] == [1, 1]  # attributed by baggage
    record = lightning_otel.read_policy_address(notify_file)
    # the gateway's address (published after the trainer's initial LLM), not the policy server's
    assert record["version"] == 2 and record["model"] == "agl-tiny" and str(policy.port) not in record["address"]
    assert record["base_url"] == f"http://{record['address']}/v1"


def test_rollouts_share_one_tls_context_instead_of_loading_ca_certificates_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx loads certifi's CA bundle into a new SSL context for every client (~30 ms of CPU): `HttpAgent` made a
    client per rollout, so every rollout of an agent service paid it, `http://` included."""
    import asyncio
    import ssl

    from lightning_otel.agent_api.lit_agent import Rollout
    from lightning_otel.tls_context import shared_tls_context

    async def chat(request: Request) -> Response:
        return JSONResponse({"reward": 1.0})

    shared_tls_context()  # built once per process (by whichever of our clients comes first)
    loads: list[object] = []
    load = ssl.SSLContext.load_verify_locations
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", lambda *a, **k: loads.append(a) or load(*a, **k))
    with AppServer(Starlette(routes=[Route("/chat", chat, methods=["POST"])])) as service:
        agent = lightning_otel.HttpAgent(f"http://{service.host}:{service.port}/chat")
        resources = {"main_llm": lightning_otel.LLM("http://127.0.0.1:9/v1", "agl-tiny")}

        async def three() -> list[Any]:
            return [await agent.rollout_async({"q": i}, resources, Rollout(f"ro-{i}", "at-1")) for i in range(3)]

        assert asyncio.run(three()) == [1.0, 1.0, 1.0]
    assert loads == []
