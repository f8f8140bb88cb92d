"""Our servers keep an idle connection longer than our clients do (httpx: 5 s). With the same 5 s on both sides, a
request sent on a connection idle for just under 5 s could cross the server's close and fail with ReadError: a
runner's first heartbeat, 5 s after it started, now and then logged "collector unreachable" and retried."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

from lightning_otel.collector.tcp_listener import KEEP_ALIVE_S

CLIENT_EXPIRY_S = 5.0  # httpx's keepalive_expiry default; uvicorn's own timeout_keep_alive default is the same


def _get(sock: socket.socket, host: str, path: str) -> bytes:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    sock.settimeout(5)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        head += chunk
    return head.split(b"\r\n", 1)[0]


def _still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""  # b"": the server closed it
    except BlockingIOError:
        return True  # nothing to read, not closed
    finally:
        sock.setblocking(True)


def test_the_collector_and_our_app_servers_keep_a_connection_past_the_clients_expiry(start_collector) -> None:
    from lightning_otel.testing import OpenAITestServer

    assert KEEP_ALIVE_S > 2 * CLIENT_EXPIRY_S
    collector = start_collector(grpc_port=None)
    with OpenAITestServer() as model_server:
        targets = {
            "collector query port": (collector.addresses.query, "/healthz"),
            "AppServer (gateway, replicas, test server)": (model_server.base_url, "/v1/models"),
        }
        connections = {}
        for name, (url, path) in targets.items():
            parts = urlsplit(url)
            sock = socket.create_connection((parts.hostname, parts.port))
            assert _get(sock, parts.netloc, path).startswith(b"HTTP/1.1 200"), name
            connections[name] = (sock, parts.netloc, path)
        time.sleep(CLIENT_EXPIRY_S + 1.0)  # past the 5 s a server with uvicorn's default keeps it
        try:
            for name, (sock, host, path) in connections.items():
                assert _still_open(sock), f"{name} closed a connection idle {CLIENT_EXPIRY_S + 1:g} s"
                assert _get(sock, host, path).startswith(b"HTTP/1.1 200"), name
        finally:
            for sock, _, _ in connections.values():
                sock.close()
