"""A lean HTTP transport for our OTLP/HTTP exporters to plain-`http://` collectors: one kept-alive `http.client`
connection instead of a `requests` session.

The SDK's exporter (opentelemetry-exporter-otlp-proto-http 1.45) sends through a pluggable transport, by default a
`requests.Session`. A runner flushes a rollout's ~10 spans in one export; with the session that export costs the
runner 3.4-3.6 ms of CPU, with this transport 1.5-1.8 ms (`benchmarks/otlp_export_cost.py`). The SDK's client
around it stays as it is: retries and their back-off, compression, headers, timeouts.
`https://` endpoints keep the SDK's transport (certificates, proxies).

The SDK's transport interface (`request`, `is_connection_error`, `close`; results with `status_code`, `reason`,
`error`, `content()`, `headers()`) is met by shape: this module imports nothing of the exporter's, and only
`otlp_exporters`, the one module that touches the OTLP exporters' internals, hands it to the SDK (version-gated).
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import urllib.parse
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# What a dropped or refused connection raises (ConnectionError and TimeoutError are OSErrors): the SDK's client sends
# once more at once, then backs off.
CONNECTION_ERRORS = (OSError, http.client.HTTPException)


@dataclass(frozen=True, slots=True)
class KeptConnectionResult:
    """One request's outcome: a status and reason when the server answered, else the error."""

    status_code: int | None = None
    reason: str | None = None
    error: Exception | None = None
    body: bytes = b""
    response_headers: Mapping[str, str] | http.client.HTTPMessage = field(default_factory=dict)

    def content(self) -> bytes:
        return self.body

    def headers(self) -> Mapping[str, str] | http.client.HTTPMessage:
        return self.response_headers

    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.text())


class KeptConnectionTransport:
    """POSTs over one kept-alive `http.client.HTTPConnection` (which sets TCP_NODELAY), reconnecting after any
    error; a lock keeps the batch processor's thread and a flushing thread from sharing it at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connection: http.client.HTTPConnection | None = None
        self._address: tuple[str, int] | None = None
        if hasattr(os, "register_at_fork"):  # a forked child shares the parent's socket and maybe a held lock
            alive = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: (transport := alive()) is not None and transport._forget())

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        data: bytes | None = None,
    ) -> KeptConnectionResult:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            return KeptConnectionResult(error=ValueError(f"this transport sends to http:// URLs only, not {url!r}"))
        address = (parts.hostname, parts.port or 80)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        with self._lock:
            try:
                connection = self._connect(address, timeout)
                connection.request(method, target or "/", body=data, headers=headers or {})
                response = connection.getresponse()
                body = response.read()
                if response.will_close:
                    self._close()
                return KeptConnectionResult(
                    status_code=response.status,
                    reason=response.reason,
                    body=body,
                    response_headers=response.msg,  # an email.message.Message: names case-insensitive
                )
            except Exception as error:  # the contract: an error in the result, never raised
                self._close()
                return KeptConnectionResult(error=error)

    def _connect(self, address: tuple[str, int], timeout: float | None) -> http.client.HTTPConnection:
        if self._connection is None or self._address != address:
            self._close()
            self._connection = http.client.HTTPConnection(*address, timeout=timeout)
            self._address = address
        elif self._connection.sock is not None:
            self._connection.sock.settimeout(timeout)
        self._connection.timeout = timeout  # used when it connects (again)
        return self._connection

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._connection = None  # the parent's: left open for it

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = None

    def is_connection_error(self, exception: Exception | None) -> bool:
        return isinstance(exception, CONNECTION_ERRORS)

    def close(self) -> None:
        with self._lock:
            self._close()
