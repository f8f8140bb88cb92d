"""Free loopback ports, for servers that must be told their ports before they start (tests and benchmarks)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` different TCP ports free on loopback now: each held until all are chosen, so two never coincide (as
    two `free_port()` calls may)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


__all__ = ["free_port", "free_ports"]
