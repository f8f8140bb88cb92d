"""Python client of the collector's query API, for the trainer and for scripts.

    from lightning_otel.collector import Client

    client = Client("http://127.0.0.1:16686")
    spans = client.wait_for_rollout("rollout-17", min_spans=5, timeout=30)   # event-driven on the server
    batch = client.rollouts_spans(["rollout-17", "rollout-18"])               # one call for a training batch
    client.rollouts(limit=10)
    client.enqueue([{"input": {"question": "..."}}])                         # the rollout queue (trainer side)

Spans come back flat: `traceId`, `spanId`, `parentSpanId`, `name`, `kind`, start/end nanoseconds, `service`,
`attributes` with native values (token ids are lists of ints), `events`, `links`, `status`, and `seq` (ingest order).
`AsyncClient` has the same methods as coroutines.

Faults are ridden out, not raised: a collector that cannot be reached (refused, restarting), or that answers `503`
(its store unavailable, its in-flight budget spent), is retried with exponential backoff and jitter for up to
`retry_for_s` (300 s by default; 0: fail at once), with one warning line when the trouble starts and one when the
collector answers again; past the bound, one `CollectorError` says for how long it was unreachable. A request whose
connection broke after it was sent is retried only when repeating it is harmless (reads, waits, heartbeats,
completions, cancels, and enqueues, whose rollout ids the client then fixes itself); a claim is not (its attempts,
if the collector took it, time out and are retried).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx

from lightning_otel.flat_span import restore_non_finite
from lightning_otel.tls_context import shared_tls_context

log = logging.getLogger("lightning_otel.collector.client")

DEFAULT_RETRY_FOR_S = 300.0

try:  # 2-3x faster than the stdlib on a batch's spans; a runner's environment may lack the collector's extras
    from orjson import loads as _loads
except ImportError:
    _loads = json.loads


class CollectorError(RuntimeError):
    """The collector could not be reached or answered with an error."""


class _Unavailable(Exception):
    """A 503: the collector is up but cannot serve (store unavailable, budget spent); nothing was done."""

    def __init__(self, response: httpx.Response) -> None:
        reason = response.text[:200]
        with contextlib.suppress(Exception):  # the collector's error envelope names the problem
            reason = str(response.json()["errors"][0]["msg"])
        super().__init__(f"HTTP 503: {reason}")
        self.response = response


def _trouble(exc: Exception) -> tuple[str, str]:
    """What went wrong, in words, and its detail: a 503 is the collector up and its store (or budget) not; anything
    else the collector not reached."""
    if isinstance(exc, _Unavailable):
        return "unavailable", str(exc)
    return "unreachable", f"{exc.__class__.__name__}: {exc}"


# Never sent (or refused before anything was done): safe to repeat whatever the request.
_UNSENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, _Unavailable)
# Sent, then the connection broke or timed out: the collector may have done it; repeat only what is harmless twice.
_AMBIGUOUS = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadTimeout, httpx.WriteTimeout)


class _Retry:
    """One request's retries: backoff with jitter, the bound, the start and recovery lines (see the docstring)."""

    def __init__(self, client: Client | AsyncClient, repeatable: bool) -> None:
        self.client, self.url, self.repeatable = client, client.url, repeatable
        self.started = time.monotonic()
        self.failures = 0

    def delay_after(self, exc: Exception) -> float:
        """Seconds to wait before the next try, or raise the CollectorError that ends the request."""
        transient = isinstance(exc, _UNSENT) or (self.repeatable and isinstance(exc, _AMBIGUOUS))
        elapsed = time.monotonic() - self.started
        bound = self.client.retry_for_s  # read each time: a process that is stopping lowers it
        if not transient or elapsed >= bound:
            kind, detail = _trouble(exc)
            said = f"collector at {self.url} {kind}"
            if transient and self.failures:
                said += f" for {elapsed:.0f} s ({self.failures + 1} tries; the bound is {bound:g} s)"
            raise CollectorError(f"{said}: {detail}") from exc
        if self.failures == 0:
            kind, detail = _trouble(exc)
            log.warning("collector at %s %s (%s): retrying for up to %g s", self.url, kind, detail, bound)
        self.failures += 1
        retry_after = _retry_after(exc)
        backoff = min(5.0, 0.25 * 2 ** min(self.failures - 1, 5)) * random.uniform(0.5, 1.0)
        wait = max(backoff, retry_after or 0.0)
        return max(0.0, min(wait, 2.0, bound - elapsed))  # short sleeps: a lowered bound is heard within 2 s

    def succeeded(self) -> None:
        if self.failures:
            log.warning("collector at %s answers again after %.1f s (%d retries)", self.url,
                        time.monotonic() - self.started, self.failures)  # fmt: skip


def _retry_after(exc: Exception) -> float | None:
    if isinstance(exc, _Unavailable):
        try:
            return min(5.0, float(exc.response.headers.get("retry-after", "")))
        except ValueError:
            return None
    return None


def collector_url(url: str) -> str:
    """A collector's query URL as given, refused when it is not one (`127.0.0.1:16686` lacks its scheme)."""
    scheme, found, rest = url.partition("://")
    if not found or scheme not in ("http", "https") or not rest.strip("/"):
        hint = f": use http://{url}" if not found and url else ""
        raise ValueError(f"{url!r} is not a collector URL (http://host:port){hint}")
    return url.rstrip("/")


def collector_url_argument(text: str) -> str:
    """`collector_url` for the command line (argparse `type=`)."""
    import argparse

    try:
        return collector_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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


def _batch_body(rollout_ids: list[str], latest: bool, attempt_ids: list[str] | None) -> dict[str, Any]:
    if attempt_ids is not None:
        if len(attempt_ids) != len(rollout_ids):
            raise ValueError("attempt_ids must pair one-to-one with rollout_ids")
        return {"rollouts": [{"rollout_id": r, "attempt_id": a} for r, a in zip(rollout_ids, attempt_ids, strict=True)]}
    return {"rollouts": [{"rollout_id": rollout_id, "latest": latest} for rollout_id in rollout_ids]}


def _checked(response: httpx.Response, pick: str | None = None, flat_spans: bool = False) -> Any:
    if response.status_code == 503:
        raise _Unavailable(response)
    if response.status_code >= 400:
        raise CollectorError(
            f"{response.request.method} {response.request.url.path}: HTTP {response.status_code} {response.text[:300]}"
        )
    body = _loads(response.content)
    if flat_spans and b'"doubleValue"' in response.content:  # a NaN or infinity somewhere: restore the floats
        body = restore_non_finite(body)
    return body if pick is None else body[pick]


class CollectorCalls:
    """The collector's trainer-facing API (rollout spans, the rollout queue, resources), shared by `Client`, whose
    methods return values, and `AsyncClient`, whose methods return coroutines."""

    def _request(
        self,
        method: str,
        path: str,
        pick: str | None = None,
        *,
        flat_spans: bool = False,
        repeatable: bool = True,
        **options: Any,
    ) -> Any:
        """One request, retried as the module docstring says (`repeatable`: harmless to repeat once sent)."""
        raise NotImplementedError

    def rollout_spans(self, rollout_id: str, *, attempt_id: str | None = None, latest: bool = False) -> Any:
        """Spans of a rollout in ingest order: one attempt, the latest one, or all attempts (default)."""
        params = _rollout_params(attempt_id, latest, 0, 0)
        return self._request("GET", f"/v1/rollouts/{rollout_id}/spans", "spans", params=params, flat_spans=True)

    def wait_for_rollout(
        self,
        rollout_id: str,
        *,
        min_spans: int = 1,
        timeout: float = 30.0,
        attempt_id: str | None = None,
        latest: bool = False,
    ) -> Any:
        """Block until at least `min_spans` spans of the rollout are committed (or `timeout`), then return them."""
        params = _rollout_params(attempt_id, latest, min_spans, timeout)
        return self._request(
            "GET", f"/v1/rollouts/{rollout_id}/spans", "spans", params=params, timeout=timeout + 10, flat_spans=True
        )

    def rollouts_spans(
        self, rollout_ids: list[str], *, latest: bool = False, attempt_ids: list[str] | None = None
    ) -> Any:
        """Spans of many rollouts in one request (a training batch): all attempts, the latest, or the given ones."""
        body = _batch_body(rollout_ids, latest, attempt_ids)
        return self._request("POST", "/v1/rollouts/spans", "rollouts", json=body, flat_spans=True)

    def complete_rollouts_spans(
        self, rollout_ids: list[str], *, attempt_ids: list[str] | None = None, wait_s: float = 30.0
    ) -> Any:
        """`rollouts_spans`, waiting on the server (event-driven, at most `wait_s`) until every rollout's spans have
        their parents, i.e. other processes' late exports arrived: `{"rollouts": {id: spans}, "incomplete": {id:
        missing parents}}`, the latter naming the rollouts still incomplete at the bound."""
        body = {**_batch_body(rollout_ids, False, attempt_ids), "wait_complete_s": wait_s}
        return self._request("POST", "/v1/rollouts/spans", json=body, timeout=wait_s + 30, flat_spans=True)

    def rollouts(self, *, limit: int = 100) -> Any:
        """Recent rollouts seen in spans: id, span count, time range, agents and attempts."""
        return self._request("GET", "/v1/rollouts", "rollouts", params={"limit": limit})

    def collector_info(self) -> Any:
        """The collector's OTLP ports and heartbeat interval (what a runner needs besides this URL)."""
        return self._request("GET", "/v1/collector")

    def enqueue(self, rollouts: list[dict[str, Any]]) -> Any:
        """Queue rollouts (`{"input": task, "task_id"?, "group_id"?, "mode"?, "max_attempts"?, "timeout_s"?}`);
        returns their records with the assigned `rollout_id`s. Ids are fixed here (unless given), so a request
        repeated after a broken connection returns the rollouts the first one queued instead of queuing them twice."""
        specs = [spec if spec.get("rollout_id") else {**spec, "rollout_id": f"ro-{uuid.uuid4().hex[:16]}"}
                 for spec in rollouts]  # fmt: skip
        body = {"rollouts": specs, "if_exists": "return"}
        return self._request("POST", "/v1/queue/enqueue", "rollouts", json=body)

    def claim(self, runner_id: str, *, max_attempts: int = 1, wait_s: float = 10.0, run_id: str | None = None) -> Any:
        """Long-poll for work: `{"attempts": [...], "heartbeat_interval_s": s, "run": {"run_id", "state"} | None,
        "live_runs": n}`, empty after `wait_s` without work. The attempts are of one run: `run_id`'s, or (None) the
        oldest claimable rollout's, named in `run`."""
        body = {"runner_id": runner_id, "max": max_attempts, "wait_s": wait_s, "run_id": run_id}
        return self._request("POST", "/v1/queue/claim", json=body, timeout=wait_s + 30, repeatable=False)

    def heartbeat(self, runner_id: str, attempts: list[tuple[str, str]]) -> Any:
        """Keep attempts alive; returns those the runner should stop (timed out or cancelled meanwhile)."""
        body = {"runner_id": runner_id, "attempts": [{"rollout_id": r, "attempt_id": a} for r, a in attempts]}
        return self._request("POST", "/v1/queue/heartbeat", "stop", json=body)

    def complete(
        self,
        rollout_id: str,
        attempt_id: str,
        status: str,
        *,
        error: str | None = None,
        reward: float | None = None,
        cause: str | None = None,
    ) -> Any:
        """Report an attempt `succeeded` or `failed` (`cause`: "infrastructure:..." or "policy:...", why):
        `{"accepted": bool, "rollout_status": ...}`."""
        body = {"rollout_id": rollout_id, "attempt_id": attempt_id, "status": status, "error": error, "reward": reward,
                "cause": cause}  # fmt: skip
        return self._request("POST", "/v1/queue/complete", json=body)

    def complete_many(self, reports: list[dict[str, Any]]) -> Any:
        """Report many attempts in one request (each a dict of `complete`'s arguments); one result per report."""
        return self._request("POST", "/v1/queue/complete", "results", json={"reports": reports})

    def wait_rollouts(self, rollout_ids: list[str], *, timeout: float = 30.0, records: str = "all") -> Any:
        """Block (on the server) until every rollout is final or `timeout`: `{"done": bool, "unfinished":
        {"queuing": n, "running": n}, "rollouts": [...]}`. `records`: which records come back, "all", "final" (the
        final ones only) or "none" (a poller that only counts them)."""
        body = {"rollout_ids": rollout_ids, "timeout_s": timeout, "records": records}
        return self._request("POST", "/v1/queue/wait", json=body, timeout=timeout + 30)

    def cancel(self, rollout_ids: list[str]) -> Any:
        return self._request("POST", "/v1/queue/cancel", "cancelled", json={"rollout_ids": rollout_ids})

    def runner_lost(self, runner_id: str, error: str = "runner process exited") -> Any:
        """Fail a dead runner's running attempts at once (they retry) instead of waiting for heartbeat timeouts."""
        return self._request("POST", f"/v1/queue/runners/{runner_id}/lost", "failed", json={"error": error})

    def rollout(self, rollout_id: str) -> Any:
        """One rollout's state with its attempts."""
        return self._request("GET", f"/v1/rollouts/{rollout_id}")

    def queued_rollouts(self, *, status: str | None = None, limit: int = 100) -> Any:
        params: dict[str, Any] = {"limit": limit, **({"status": status} if status else {})}
        return self._request("GET", "/v1/queue/rollouts", "rollouts", params=params)

    def rollouts_page(
        self, *, order: str = "position", status: str | None = None, after: str | None = None, limit: int = 500
    ) -> Any:
        """One page of every rollout, oldest first (`order="group"`: by group, then position): `{"rollouts": [...],
        "next": cursor}`; pass `after=cursor` for the next page, until `next` is None."""
        params: dict[str, Any] = {"order": order, "limit": limit}
        params.update({key: value for key, value in (("status", status), ("after", after)) if value})
        return self._request("GET", "/v1/queue/rollouts/page", params=params)

    def queue_stats(self, status: str | None = None) -> Any:
        """Rollout counts by status (`status`: that one only, cheap on a large queue)."""
        params = {"status": status} if status else None
        return self._request("GET", "/v1/queue/stats", "counts", params=params)

    def put_resources(self, resources: dict[str, Any], *, run_id: str | None = None) -> Any:
        """Publish a new version of the named resources (JSON form) for a run (None: outside any run); returns the
        version number."""
        body = {"resources": resources, "run_id": run_id}
        return self._request("POST", "/v1/resources", "version", json=body, repeatable=False)

    def resources(self, version: int | str = "latest", *, run_id: str | None = None) -> Any:
        """`{"version", "resources", "created_ns", "run_id"}` of one version, or the latest: the newest on the
        collector, or with `run_id` that run's (a run that published none reads those published outside any run)."""
        return self._request("GET", f"/v1/resources/{version}", params={"run_id": run_id} if run_id else None)

    def start_run(self, run_id: str, *, lease_s: float = 60.0) -> Any:
        """Start a run holding a lease of `lease_s` (renew it: `renew_run`): `{"run", "cancelled"}`, the latter how
        many unfinished rollouts of runs no longer running were cancelled."""
        return self._request("POST", "/v1/runs", json={"run_id": run_id, "lease_s": lease_s})

    def renew_run(self, run_id: str) -> Any:
        """Renew a run's lease; the run as it is now (a `lost` or ended one stays so)."""
        return self._request("POST", f"/v1/runs/{run_id}/renew", "run")

    def end_run(self, run_id: str, state: str = "finished") -> Any:
        """End a run (`finished` or `failed`); its unfinished rollouts are cancelled: `{"run", "cancelled"}`."""
        return self._request("POST", f"/v1/runs/{run_id}/end", json={"state": state})

    def run(self, run_id: str) -> Any:
        return self._request("GET", f"/v1/runs/{run_id}")

    def runs(self, *, state: str | None = None, limit: int = 100) -> Any:
        params: dict[str, Any] = {"limit": limit, **({"state": state} if state else {})}
        return self._request("GET", "/v1/runs", "runs", params=params)


class Client(CollectorCalls):
    """`retry_for_s`: how long a fault is ridden out before `CollectorError` (module docstring)."""

    def __init__(
        self,
        url: str = "http://127.0.0.1:16686",
        *,
        auth_token: str | None = None,
        timeout: float = 30.0,
        retry_for_s: float = DEFAULT_RETRY_FOR_S,
    ) -> None:
        self.url = collector_url(url)
        self.auth_token = auth_token
        self.retry_for_s = retry_for_s
        self._http = httpx.Client(
            base_url=self.url, headers=_headers(auth_token), timeout=timeout, verify=shared_tls_context()
        )

    @property
    def closed(self) -> bool:
        return self._http.is_closed

    def _request(
        self,
        method: str,
        path: str,
        pick: str | None = None,
        *,
        flat_spans: bool = False,
        repeatable: bool = True,
        **options: Any,
    ) -> Any:
        retry = _Retry(self, repeatable)
        while True:
            try:
                answer = _checked(self._http.request(method, path, **options), pick, flat_spans)
            except (httpx.HTTPError, _Unavailable) as exc:
                time.sleep(retry.delay_after(exc))
                continue
            retry.succeeded()
            return answer

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


class AsyncClient(CollectorCalls):
    """`retry_for_s`: how long a fault is ridden out before `CollectorError` (module docstring)."""

    def __init__(
        self,
        url: str = "http://127.0.0.1:16686",
        *,
        auth_token: str | None = None,
        timeout: float = 30.0,
        retry_for_s: float = DEFAULT_RETRY_FOR_S,
    ) -> None:
        self.url = collector_url(url)
        self.auth_token = auth_token
        self.retry_for_s = retry_for_s
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=_headers(auth_token), timeout=timeout, verify=shared_tls_context()
        )

    async def _request(  # type: ignore[override]
        self,
        method: str,
        path: str,
        pick: str | None = None,
        *,
        flat_spans: bool = False,
        repeatable: bool = True,
        **options: Any,
    ) -> Any:
        retry = _Retry(self, repeatable)
        while True:
            try:
                answer = _checked(await self._http.request(method, path, **options), pick, flat_spans)
            except (httpx.HTTPError, _Unavailable) as exc:
                await asyncio.sleep(retry.delay_after(exc))
                continue
            retry.succeeded()
            return answer

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def otlp_endpoint_for(collector_url: str, info: dict[str, Any]) -> str:
    """The collector's OTLP/HTTP address as seen from here: the host we reach it by, its advertised port."""
    parts = urlsplit(collector_url)
    host = parts.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme or 'http'}://{host}:{info['otlp_http_port']}"
