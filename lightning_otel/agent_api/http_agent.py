"""`HttpAgent`: the trainer-side client of an agent that runs as an HTTP service (another environment, another
machine, another language), as verl's "agent_lightning_like" recipe runs one.

    trainer.fit(agl.HttpAgent("http://agents:8000/chat"), tasks)

Each rollout POSTs one JSON body to the service:

    {"task": ..., "rollout_id": "...", "attempt_id": "...",
     "llm": {"base_url": ".../rollout/<id>/attempt/<id>/v1", "model": "...", "api_key": "...",
             "sampling_parameters": {...}}}

with `traceparent`/`baggage` headers carrying the rollout (an instrumented service joins the rollout's trace). The
service calls the model at `llm.base_url` (behind the trainer's gateway the rollout is in that path, so a bare
service needs no headers; `x-agl-agent-name` names its agent) and answers `{"reward": <number or null>}`; a null or
missing reward leaves it to the rewards the service emitted on its spans. An HTTP error, a reply that is not JSON or
a reward that is not a number fails the attempt with that message (it retries like any failed attempt).
"""

from __future__ import annotations

from typing import Any

import httpx

from lightning_otel.agent_api.lit_agent import LitAgent, NamedResources, Reward, Rollout
from lightning_otel.capture.propagation import outgoing_headers
from lightning_otel.tls_context import shared_tls_context


class AgentServiceError(RuntimeError):
    """The agent service answered with an error, or with something that is not a reward."""


class HttpAgent(LitAgent[Any]):
    def __init__(
        self,
        url: str,
        *,
        resource: str = "main_llm",
        reward_key: str = "reward",
        timeout_s: float = 600.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self.resource = resource
        self.reward_key = reward_key
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})

    def request_body(self, task: Any, resources: NamedResources, rollout: Rollout) -> dict[str, Any]:
        """What the service receives; override to speak a service's own format."""
        llm = resources[self.resource]
        attempt_id = rollout.attempt.attempt_id
        return {
            "task": task,
            "rollout_id": rollout.rollout_id,
            "attempt_id": attempt_id,
            "llm": {
                "base_url": llm.get_base_url(rollout.rollout_id, attempt_id),
                "model": llm.model,
                "api_key": llm.api_key,
                "sampling_parameters": dict(llm.sampling_parameters),
            },
        }

    async def rollout_async(self, task: Any, resources: NamedResources, rollout: Rollout) -> Reward:
        body = self.request_body(task, resources, rollout)
        async with httpx.AsyncClient(timeout=self.timeout_s, verify=shared_tls_context()) as client:
            try:
                reply = await client.post(self.url, json=body, headers={**self.headers, **outgoing_headers()})
            except httpx.HTTPError as exc:
                raise AgentServiceError(f"agent service {self.url} unreachable: {exc!r}") from exc
        if reply.status_code >= 400:
            raise AgentServiceError(f"agent service {self.url} answered HTTP {reply.status_code}: {reply.text[:500]}")
        try:
            answer = reply.json()
        except ValueError:
            raise AgentServiceError(f"agent service {self.url} answered non-JSON: {reply.text[:200]!r}") from None
        reward = answer.get(self.reward_key) if isinstance(answer, dict) else None
        if reward is None:
            return None
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise AgentServiceError(f"agent service {self.url}: {self.reward_key!r} must be a number or null, "
                                    f"got {reward!r}")  # fmt: skip
        return float(reward)
