"""Python client of the collector's query API, for the trainer and for scripts.

    from lightning_otel.collector import Client

    client = Client("http://127.0.0.1:16686")
    spans = client.wait_for_rollout("rollout-17", min_spans=5, timeout=30)   # event-driven on the server
    batch = client.rollouts_spans(["rollout-17", "rollout-18"])               # one call for a training batch
    client.rollouts(limit=10)

Spans come back flat: `traceId`, `spanId`, `parentSpanId`, `name`, `kind`, start/end nanoseconds, `service`,
`attributes` with native values (token ids are lists of ints), `events`, `links`, `status`, and `seq` (ingest order).
`AsyncClient` has the same methods as coroutines.
"""

from __future__ import annotations

from typing import Any

import httpx

Span = dict[str, Any]


class CollectorError(RuntimeError):
    """The collector could not be reached or answered with an error."""


def _headers(auth_token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {auth_token}"} if auth_token else {}


def _rollout_params(attempt_id: str | None, latest: bool, min_spans: int, timeout: float) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if attempt_id:
        params["attempt_id"] = attempt_id
    if latest:
        params["latest"] = "true"
    if min_spans:
        params["min_spans"] = min_spans
        params["timeout"] = timeout
    return params


def _batch_body(rollout_ids: list[str], latest: bool) -> dict[str, Any]:
    return {"rollouts": [{"rollout_id": rollout_id, "latest": latest} for rollout_id in rollout_ids]}


def _checked(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise CollectorError(
            f"{response.request.method} {response.request.url.path}: HTTP {response.status_code} {response.text[:300]}"
        )
    return response.json()


class Client:
    def __init__(
        self, url: str = "http://127.0.0.1:16686", *, auth_token: str | None = None, timeout: float = 30.0
    ) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=_headers(auth_token), timeout=timeout)

    def _request(self, method: str, path: str, **options: Any) -> Any:
        try:
            return _checked(self._http.request(method, path, **options))
        except httpx.HTTPError as exc:
            raise CollectorError(f"collector at {self.url} unreachable: {exc}") from exc

    def _get(self, path: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        return self._request("GET", path, params=params, timeout=timeout or self._http.timeout)

    def rollout_spans(self, rollout_id: str, *, attempt_id: str | None = None, latest: bool = False) -> list[Span]:
        """Spans of a rollout in ingest order: one attempt, the latest one, or all attempts (default)."""
        return self._get(f"/v1/rollouts/{rollout_id}/spans", _rollout_params(attempt_id, latest, 0, 0))["spans"]

    def wait_for_rollout(
        self,
        rollout_id: str,
        *,
        min_spans: int = 1,
        timeout: float = 30.0,
        attempt_id: str | None = None,
        latest: bool = False,
    ) -> list[Span]:
        """Block until at least `min_spans` spans of the rollout are committed (or `timeout`), then return them."""
        params = _rollout_params(attempt_id, latest, min_spans, timeout)
        return self._get(f"/v1/rollouts/{rollout_id}/spans", params, timeout=timeout + 10)["spans"]

    def rollouts_spans(self, rollout_ids: list[str], *, latest: bool = False) -> dict[str, list[Span]]:
        """Spans of many rollouts in one request (a training batch)."""
        return self._request("POST", "/v1/rollouts/spans", json=_batch_body(rollout_ids, latest))["rollouts"]

    def rollouts(self, *, limit: int = 100) -> list[dict[str, Any]]:
        """Recent rollouts: id, span count, time range, agents and attempts seen."""
        return self._get("/v1/rollouts", {"limit": limit})["rollouts"]

    def healthy(self) -> bool:
        try:
            return self._http.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncClient:
    def __init__(
        self, url: str = "http://127.0.0.1:16686", *, auth_token: str | None = None, timeout: float = 30.0
    ) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.url, headers=_headers(auth_token), timeout=timeout)

    async def _request(self, method: str, path: str, **options: Any) -> Any:
        try:
            return _checked(await self._http.request(method, path, **options))
        except httpx.HTTPError as exc:
            raise CollectorError(f"collector at {self.url} unreachable: {exc}") from exc

    async def _get(self, path: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        return await self._request("GET", path, params=params, timeout=timeout or self._http.timeout)

    async def rollout_spans(
        self, rollout_id: str, *, attempt_id: str | None = None, latest: bool = False
    ) -> list[Span]:
        params = _rollout_params(attempt_id, latest, 0, 0)
        return (await self._get(f"/v1/rollouts/{rollout_id}/spans", params))["spans"]

    async def wait_for_rollout(
        self,
        rollout_id: str,
        *,
        min_spans: int = 1,
        timeout: float = 30.0,
        attempt_id: str | None = None,
        latest: bool = False,
    ) -> list[Span]:
        params = _rollout_params(attempt_id, latest, min_spans, timeout)
        return (await self._get(f"/v1/rollouts/{rollout_id}/spans", params, timeout=timeout + 10))["spans"]

    async def rollouts_spans(self, rollout_ids: list[str], *, latest: bool = False) -> dict[str, list[Span]]:
        body = _batch_body(rollout_ids, latest)
        return (await self._request("POST", "/v1/rollouts/spans", json=body))["rollouts"]

    async def rollouts(self, *, limit: int = 100) -> list[dict[str, Any]]:
        return (await self._get("/v1/rollouts", {"limit": limit}))["rollouts"]

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
