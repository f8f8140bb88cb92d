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
from typing import Any
from urllib.parse import urlsplit

import httpx

from lightning_otel.collector.client_calls import CollectorCalls
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
