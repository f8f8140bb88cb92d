"""Bearer-token auth, one rule for every port: the OTLP receivers and the query API (all routes but `/healthz`)."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from lightning_otel.collector.query_params import error_envelope


def bearer_ok(header: str | None, token: str | None) -> bool:
    """`Authorization: Bearer <token>`; the scheme is case-insensitive (RFC 7235), the token is compared exactly."""
    if not token:
        return True
    if header is None:
        return False
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), token.encode())


class BearerAuth:
    """ASGI middleware: every route but `open_paths` needs `Authorization: Bearer <token>` when a token is set."""

    def __init__(self, app: ASGIApp, token: str | None, open_paths: set[str]) -> None:
        self.app = app
        self.token = token
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token and scope["type"] == "http" and scope["path"] not in self.open_paths:
            header = Headers(scope=scope).get("authorization")
            if not bearer_ok(header, self.token):
                response = JSONResponse(
                    error_envelope(401, "missing or wrong bearer token"),
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
