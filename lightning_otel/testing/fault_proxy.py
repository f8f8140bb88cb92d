"""A fault proxy: an HTTP proxy in front of the policy, as an agent sees it (the chaos run's, `benchmarks.chaos`, and
the tests of what a cut answer leaves). Each call goes to the URL its `x-chaos-upstream` header names (the path after
the proxy's root appended); whoever drives it sets what it does next: answer 503 until a time, hang each call until
a time, or cut the next N calls' connections halfway through the answer (after the policy generated it). A raw ASGI
app on uvicorn, forwarding with httpx. `AGL_CHAOS_DEBUG=1`: uvicorn's log at debug."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import httpx
import uvicorn

from lightning_otel.testing.ports import free_port

UPSTREAM_HEADER = "x-chaos-upstream"  # where the proxy sends the call: the policy address the agent was given
_DEBUG = bool(os.environ.get("AGL_CHAOS_DEBUG"))
HOP_HEADERS = {b"host", b"content-length", b"connection", b"transfer-encoding", UPSTREAM_HEADER.encode()}


class ConnectionCut(Exception):
    """Raised after half an answer was sent: uvicorn closes the connection, the client reads a broken answer."""


class FaultProxy:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.unavailable_until = 0.0
        self.hang_until = 0.0
        self.cuts_left = 0
        # what the nemesis did, and what the policy behind did (answers, errors, the slowest answer's seconds)
        self.counts: dict[str, float] = {"calls": 0, "answered_503": 0, "hung": 0, "cut": 0, "forwarded": 0,
                                         "upstream_errors": 0, "upstream_s_max": 0.0}  # fmt: skip
        self._lock = threading.Lock()
        self._server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, interface="asgi3",
                                                     log_level="critical" if not _DEBUG else "debug",
                                                     lifespan="off"))  # fmt: skip
        self._thread = threading.Thread(target=self._server.run, name="chaos-fault-proxy", daemon=True)
        self._client: httpx.AsyncClient | None = None

    # --- the nemesis's levers ------------------------------------------------------------------------------------
    def answer_503_for(self, seconds: float) -> None:
        self.unavailable_until = time.monotonic() + seconds

    def hang_for(self, seconds: float) -> None:
        self.hang_until = time.monotonic() + seconds

    def cut_next(self, calls: int) -> None:
        with self._lock:
            self.cuts_left += calls

    # --- serving ---------------------------------------------------------------------------------------------------
    def __enter__(self) -> FaultProxy:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the fault proxy did not start in 20 s")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {key.lower(): value for key, value in scope["headers"]}
        upstream = headers.get(UPSTREAM_HEADER.encode(), b"").decode()
        self.counts["calls"] += 1
        if not upstream:
            await _answer(send, 400, b'{"error": {"message": "no x-chaos-upstream header"}}')
            return
        if time.monotonic() < self.unavailable_until:
            self.counts["answered_503"] += 1
            await _answer(send, 503, b'{"error": {"message": "chaos: the policy is unavailable"}}')
            return
        if (wait := self.hang_until - time.monotonic()) > 0:
            self.counts["hung"] += 1
            await asyncio.sleep(wait)
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=120.0)
        target = upstream.rstrip("/") + "/" + scope["path"].lstrip("/")
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode()
        forwarded = [(k, v) for k, v in scope["headers"] if k.lower() not in HOP_HEADERS]
        began = time.monotonic()
        try:
            answer = await self._client.request(scope["method"], target, content=body, headers=forwarded)
        except httpx.HTTPError as exc:
            self.counts["upstream_errors"] += 1
            await _answer(send, 502, f'{{"error": {{"message": "chaos proxy: {type(exc).__name__}"}}}}'.encode())
            return
        self.counts["forwarded"] += 1
        self.counts["upstream_s_max"] = max(self.counts["upstream_s_max"], time.monotonic() - began)
        with self._lock:
            cut = self.cuts_left > 0
            self.cuts_left -= int(cut)
        kept = [(k.encode(), v.encode()) for k, v in answer.headers.items() if k.encode() not in HOP_HEADERS]
        kept.append((b"content-length", str(len(answer.content)).encode()))
        await send({"type": "http.response.start", "status": answer.status_code, "headers": kept})
        if cut:
            self.counts["cut"] += 1
            await send({"type": "http.response.body", "body": answer.content[: len(answer.content) // 2],
                        "more_body": True})  # fmt: skip
            raise ConnectionCut("chaos: the connection is cut halfway through the answer")
        await send({"type": "http.response.body", "body": answer.content})


async def _answer(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
