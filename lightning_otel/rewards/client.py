"""An async client of the reward-model service (`lightning-otel reward-model serve`, or any server with its
`/score` route).

    client = RewardModelClient("http://127.0.0.1:8010", api_key=...)
    value = await client.score_one([{"role": "user", ...}, {"role": "assistant", "content": answer}])

`score_one` calls made at about the same time (the rollouts a runner runs concurrently) go out as one `/score`
request (`MicroBatcher`); `score(conversations)` sends a list itself. A request that times out, cannot connect or
gets a 5xx is retried (bounded, exponential backoff with jitter, tenacity) with the same `X-Request-Id`, so the
service answers a retry of a request it already scored from memory; a 4xx is never retried and raises
`RewardModelError` with the service's message. Needs httpx and tenacity (the `[rewards]` extra).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import httpx
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from lightning_otel.rewards.micro_batch import MicroBatcher
from lightning_otel.tls_context import shared_tls_context

Message = dict[str, Any]
MAX_INPUTS = 256  # the service's limit per request


class RewardModelError(RuntimeError):
    """The reward model service refused a request (4xx), or failed after every retry."""


class _Retryable(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text[:300]}")
        self.status = status


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, (_Retryable, httpx.TimeoutException, httpx.TransportError))


class RewardModelClient:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_s: float = 0.2,
        max_batch: int = 64,
        max_wait_s: float = 0.005,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model  # None: the service's own (read from /v1/models on first use)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.retries = 0  # how many retries were made (all requests)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout_s, verify=shared_tls_context()
        )
        self._batcher: MicroBatcher[Sequence[Message], float] = MicroBatcher(
            self.score, max_batch=max_batch, max_wait_s=max_wait_s
        )
        self.model_version: str | None = None

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        request_id = uuid.uuid4().hex  # one id for every try: the service answers a retry from memory
        attempts = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_random_exponential(multiplier=self.backoff_s, max=10 * self.backoff_s),
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        try:
            async for attempt in attempts:
                with attempt:
                    if attempt.retry_state.attempt_number > 1:
                        self.retries += 1
                    response = await self._http.post(path, json=body, headers={"X-Request-Id": request_id})
                    if response.status_code >= 500:
                        raise _Retryable(response.status_code, response.text)
        except (_Retryable, httpx.HTTPError) as exc:
            raise RewardModelError(f"{self.base_url}{path} failed after {self.max_retries + 1} tries: {exc}") from exc
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:300]
            raise RewardModelError(f"{self.base_url}{path} refused the request ({response.status_code}): {message}")
        return response.json()

    async def name(self) -> str:
        if self.model is None:
            response = await self._http.get("/v1/models")
            if response.status_code != 200:
                raise RewardModelError(f"{self.base_url}/v1/models answered {response.status_code}: {response.text}")
            self.model = response.json()["data"][0]["id"]
        return self.model

    async def score(self, conversations: Sequence[Sequence[Message]]) -> list[float]:
        """Scores of conversations ending with the answer, in order (chunks of the service's request limit)."""
        scores: list[float] = []
        for start in range(0, len(conversations), MAX_INPUTS):
            chunk = conversations[start : start + MAX_INPUTS]
            inputs = [{"id": start + i, "messages": list(messages)} for i, messages in enumerate(chunk)]
            answer = await self._post("/score", {"inputs": inputs, **({"model": self.model} if self.model else {})})
            self.model = self.model or answer["model"]
            self.model_version = answer.get("model_version")
            scores.extend(float(item["score"]) for item in sorted(answer["data"], key=lambda item: item["index"]))
        return scores

    async def score_one(self, messages: Sequence[Message]) -> float:
        """One conversation's score; concurrent calls share a request."""
        (value,) = await self._batcher.submit([messages])
        return value

    async def score_pair(self, messages: Sequence[Message], chosen: str, rejected: str) -> dict[str, Any]:
        return await self._post("/score-pair", {"messages": list(messages), "chosen": chosen, "rejected": rejected})

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> RewardModelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
