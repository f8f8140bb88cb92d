"""Our servers keep an idle connection longer than our clients do (httpx: 5 s). With the same 5 s on both sides, a
request sent on a connection idle for just under 5 s could cross the server's close and fail with ReadError: a
runner's first heartbeat, 5 s after it started, now and then logged "collector unreachable" and retried."""

from __future__ import annotations

import http.client
import socket
import time
from urllib.parse import urlsplit

from lightning_otel.collector.tcp_listener import KEEP_ALIVE_S

CLIENT_EXPIRY_S = 5.0  # httpx's keepalive_expiry default; uvicorn's own timeout_keep_alive default is the same


def _get(connection: http.client.HTTPConnection, path: str) -> int:
    """One request on the kept connection, its response read whole (the next one starts clean)."""
    connection.request("GET", path)
    response = connection.getresponse()
    response.read()
    return response.status


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
            connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
            assert _get(connection, path) == 200, name
            connections[name] = (connection, path)
        time.sleep(CLIENT_EXPIRY_S + 1.0)  # past the 5 s a server with uvicorn's default keeps it
        try:
            for name, (connection, path) in connections.items():
                sock = connection.sock
                assert sock is not None and _still_open(sock), (
                    f"{name} closed a connection idle {CLIENT_EXPIRY_S + 1:g} s"
                )
                assert _get(connection, path) == 200, name
                assert connection.sock is sock, f"{name}: the request went on a new connection"
        finally:
            for connection, _ in connections.values():
                connection.close()
