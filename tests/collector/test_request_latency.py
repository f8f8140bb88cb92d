"""No server of ours makes a small request wait for Nagle's algorithm: with TCP_NODELAY off on the server's side,
each reply written in two pieces waits for the client's delayed ACK, ~40 ms a request (it was 44 ms on every call to
the collector's query and OTLP ports). Each server answers a short run of small requests, one connection, back to
back; the median must stay far below that stall (it is 1-2 ms here)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import httpx

from lightning_otel.collector.tcp_listener import listening_socket
from lightning_otel.testing.otlp_factory import make_request

STALL_S = 0.040  # Linux's minimum delayed-ACK timeout
REQUESTS = 15


def median_seconds(request: Callable[[], httpx.Response]) -> float:
    request().raise_for_status()  # connection opened, routes warm
    times = []
    for _ in range(REQUESTS):
        started = time.perf_counter()
        request().raise_for_status()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def test_the_collector_query_and_otlp_ports_answer_without_a_stall(start_collector) -> None:
    collector = start_collector(grpc_port=None)
    addresses = collector.addresses
    body = make_request([]).SerializeToString()
    with httpx.Client(base_url=addresses.query) as query, httpx.Client(base_url=addresses.otlp_http) as otlp:
        query.post("/v1/queue/enqueue", json={"rollouts": [{"input": {"q": 1}, "mode": "train"}]}).raise_for_status()
        timings = {
            "GET /v1/queue/rollouts": median_seconds(lambda: query.get("/v1/queue/rollouts", params={"limit": 5})),
            "POST /v1/queue/claim": median_seconds(
                lambda: query.post("/v1/queue/claim", json={"runner_id": "r", "max": 1, "wait_s": 0})
            ),
            "POST /v1/traces": median_seconds(
                lambda: otlp.post("/v1/traces", content=body, headers={"content-type": "application/x-protobuf"})
            ),
        }
    assert all(seconds < STALL_S / 2 for seconds in timings.values()), timings


def test_our_app_servers_answer_without_a_stall() -> None:
    """The policy gateway, the replicas, the test server and the reward-model service all listen through AppServer
    or `listening_socket`."""
    from lightning_otel.testing import OpenAITestServer

    with OpenAITestServer() as server, httpx.Client(base_url=server.base_url) as client:
        chat = {"model": "agl-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        seconds = median_seconds(lambda: client.post("/chat/completions", json=chat))
    assert seconds < STALL_S / 2, seconds


def test_the_listening_socket_turns_nagle_off_for_accepted_connections() -> None:
    """What the servers rely on, checked on the accepted socket itself."""
    import socket

    listener = listening_socket("127.0.0.1", 0)
    listener.listen(1)
    with listener, socket.create_connection(listener.getsockname()) as _client:
        accepted, _ = listener.accept()
        with accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert accepted.proto == socket.IPPROTO_TCP  # asyncio sets TCP_NODELAY itself only on these
