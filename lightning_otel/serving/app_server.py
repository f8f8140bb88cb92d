"""Serving our OpenAI-compatible apps (test server, policy gateway, CPU replica): a loopback server in a background
thread (a free port unless one is given), and the request/error shapes they share."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lightning_otel.collector.tcp_listener import listening_socket, server_config

if TYPE_CHECKING:  # starlette is imported when a server is built: `lightning_otel.testing` imports this module
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response


def openai_error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """An error in the OpenAI API's shape."""
    from starlette.responses import JSONResponse

    return JSONResponse({"error": {"message": message, "code": status}}, status_code=status, headers=headers)


async def json_object_body(request: Request) -> dict[str, Any] | Response:
    """The request's JSON object, or the 400 to answer with."""
    try:
        body = json.loads(await request.body())
    except ValueError as exc:
        return openai_error(400, f"invalid JSON body: {exc}")
    if not isinstance(body, dict):
        return openai_error(400, "the request body must be a JSON object")
    return body


class AppServer:
    """`with AppServer(app) as server: server.base_url` (the OpenAI-style `/v1` base of the app)."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, name: str = "agl-app-server") -> None:
        self.app = app
        self.name = name
        self._socket = listening_socket(host, port)
        self.host, self.port = self._socket.getsockname()[:2]
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> AppServer:
        import uvicorn

        config = server_config(self.app, log_level="warning", lifespan="on", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name=self.name, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{self.name} did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> AppServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
