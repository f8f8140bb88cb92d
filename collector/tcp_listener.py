"""The listening sockets of every HTTP server of ours (collector ports, policy gateway, replicas, reward models), and
how long those servers keep an idle connection.

Made with IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on accepted sockets whose proto says TCP. And
TCP_NODELAY on the listener itself, which Linux copies to accepted sockets. Without it, Nagle's algorithm meets the
client's delayed ACK and every small reply waits ~40 ms (measured: 44 ms per collector request, 1-2 ms with it).

An idle connection is kept `KEEP_ALIVE_S`, longer than our clients keep one (httpx: 5 s). With uvicorn's default,
the same 5 s, a request sent on a connection idle for just under 5 s could cross the server's close: the client
got a ReadError and retried (a runner's first heartbeat, 5 s after it started, now and then did).
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uvicorn

KEEP_ALIVE_S = 30


def server_config(app: Any, **options: Any) -> uvicorn.Config:
    """A `uvicorn.Config` for one of our servers: `options` as uvicorn takes them, idle connections kept
    `KEEP_ALIVE_S`."""
    import uvicorn

    return uvicorn.Config(app, timeout_keep_alive=KEEP_ALIVE_S, **options)


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) (0: a free port), ready for uvicorn's `sockets=` (it listens on it); the
    error of a busy or forbidden address names it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    return sock


def port_number(text: str, *, allow_off: bool = False) -> int:
    """A port from the command line (argparse `type=`): 0-65535 (0: a free one), or -1 (off) where allowed."""
    import argparse

    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not (0 <= port <= 65535 or (allow_off and port == -1)):
        allowed = "-1 (off) or 0-65535" if allow_off else "0-65535 (0: a free port)"
        raise argparse.ArgumentTypeError(f"{port} is not a port: use {allowed}")
    return port


def port_or_off(text: str) -> int:
    """`port_number`, with -1 for "off"."""
    return port_number(text, allow_off=True)
