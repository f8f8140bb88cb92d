"""One TLS context per process for the httpx clients we create.

httpx builds a new SSL context for every client, loading certifi's CA bundle into it: ~30 ms of CPU per client on
this project's 2-core VM, `http://` endpoints included. `HttpAgent` made a client per rollout, so every rollout of an
agent service paid it. The context built here is httpx's own default (`httpx.create_ssl_context()`: certifi's
bundle, `SSL_CERT_FILE`/`SSL_CERT_DIR` as set when it is first built), made once and shared by our clients; an
`ssl.SSLContext` may serve many connections and threads. Other libraries' clients are untouched.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def shared_tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()
