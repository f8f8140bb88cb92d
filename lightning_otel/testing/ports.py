"""A free loopback port, for a server that must be told its port before it starts (tests and benchmarks)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


__all__ = ["free_port"]
