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
            max_attempts=1,
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
