"""The rollout queue over HTTP: what runners and trainers on other machines use, bad input included."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from lightning_otel.collector import Client
from lightning_otel.collector.client import CollectorError


def test_queue_round_trip_over_http(start_collector) -> None:
    collector = start_collector(heartbeat_timeout_s=5.0)
    client = Client(collector.addresses.query)
    info = client.collector_info()
    assert info["otlp_http_port"] == int(collector.addresses.otlp_http.rsplit(":", 1)[1])
    assert client.put_resources({"main_llm": {"endpoint": "http://127.0.0.1:1/v1"}}) == 1
    queued = client.enqueue([{"input": {"q": 1}, "task_id": "t1", "max_attempts": 2}])
    claimed = client.claim("r1", max_attempts=4, wait_s=0)
    assert claimed["heartbeat_interval_s"] == pytest.approx(5 / 3)
    (attempt,) = claimed["attempts"]
    assert (attempt["rollout_id"], attempt["attempt_id"], attempt["input"]) == (
        queued[0]["rollout_id"],
        "at-1",
        {"q": 1},
    )
    assert client.heartbeat("r1", [(attempt["rollout_id"], "at-1")]) == []
    assert client.complete(attempt["rollout_id"], "at-1", "succeeded", reward=1.0) == {
        "accepted": True,
        "rollout_status": "succeeded",
    }
    done = client.wait_rollouts([attempt["rollout_id"]], timeout=1)
    assert done["done"] and done["rollouts"][0]["reward"] == 1.0
    assert done["unfinished"] == {"queuing": 0, "running": 0}
    assert client.wait_rollouts([attempt["rollout_id"]], timeout=1, records="none")["rollouts"] == []
    assert client.rollout(attempt["rollout_id"])["attempt_list"][0]["runner_id"] == "r1"
    assert client.queued_rollouts(status="succeeded")[0]["rollout_id"] == attempt["rollout_id"]
    assert client.queue_stats()["succeeded"] == 1
    assert client.queue_stats("succeeded") == {"succeeded": 1} and client.queue_stats("running") == {"running": 0}
    assert client.resources()["resources"] == {"main_llm": {"endpoint": "http://127.0.0.1:1/v1"}}


def test_long_polls_answer_on_events_not_on_timers(start_collector) -> None:
    collector = start_collector()
    client = Client(collector.addresses.query)
    claimed: dict = {}
    claimer = threading.Thread(target=lambda: claimed.update(client.claim("r", wait_s=20)))
    started = time.monotonic()
    claimer.start()
    time.sleep(0.2)
    (queued,) = Client(collector.addresses.query).enqueue([{"input": 1, "max_attempts": 1}])
    claimer.join(10)
    assert time.monotonic() - started < 2 and len(claimed["attempts"]) == 1
    waited: dict = {}
    waiter = threading.Thread(target=lambda: waited.update(client.wait_rollouts([queued["rollout_id"]], timeout=20)))
    waiter.start()
    time.sleep(0.2)
    Client(collector.addresses.query).complete(queued["rollout_id"], "at-1", "failed", error="x")
    waiter.join(10)
    assert waited["done"] and waited["rollouts"][0]["status"] == "failed"
    assert time.monotonic() - started < 4


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("POST", "/v1/queue/enqueue", b"not json", 400, "JSON object"),
        ("POST", "/v1/queue/enqueue", {"rollouts": []}, 400, "1 to 10000"),
        ("POST", "/v1/queue/enqueue", {"rollouts": [{"task_id": "x"}]}, 400, '"input"'),
        ("POST", "/v1/queue/enqueue", {"rollouts": [{"input": 1, "mode": "prod"}]}, 400, "mode must be"),
        ("POST", "/v1/queue/claim", {"max": 2}, 400, '"runner_id" is required'),
        ("POST", "/v1/queue/claim", {"runner_id": "r", "max": 0}, 400, "between 1 and 1000"),
        ("POST", "/v1/queue/claim", {"runner_id": "r", "max": True}, 400, "wrong type"),
        ("POST", "/v1/queue/complete", {"rollout_id": "x", "attempt_id": "a", "status": "succeeded"}, 404, "no rollout"),  # noqa: E501
        ("POST", "/v1/queue/complete", {"rollout_id": "x", "attempt_id": "a", "status": "great"}, 400, "must be one"),
        ("POST", "/v1/queue/heartbeat", {"runner_id": "r", "attempts": [1]}, 400, "rollout_id"),
        ("POST", "/v1/queue/wait", {"rollout_ids": "a"}, 400, "wrong type"),
        ("POST", "/v1/queue/wait", {"rollout_ids": ["a"], "records": "some"}, 400, '"records" must be one of'),
        ("GET", "/v1/queue/rollouts?status=done", None, 400, "unknown status"),
        ("GET", "/v1/queue/stats?status=done", None, 400, "unknown status"),
        ("GET", "/v1/rollouts/nope", None, 404, "no rollout"),
        ("GET", "/v1/resources/latest", None, 404, "no resources"),
        ("GET", "/v1/resources/x1", None, 400, "a number"),
        ("POST", "/v1/resources", {"resources": [1]}, 400, "wrong type"),
    ],
)  # fmt: skip
def test_bad_requests_get_clear_errors_and_the_queue_keeps_serving(
    start_collector, method: str, path: str, body: object, status: int, message: str
) -> None:
    collector = start_collector()
    url = collector.addresses.query + path
    options = {"content": body} if isinstance(body, bytes) else {"json": body} if body is not None else {}
    response = httpx.request(method, url, **options)
    assert response.status_code == status, response.text
    assert message in response.json()["errors"][0]["msg"]
    assert Client(collector.addresses.query).enqueue([{"input": 1}])  # still serving


def test_queue_routes_need_the_bearer_token(start_collector) -> None:
    collector = start_collector(auth_token="s3cret")
    with pytest.raises(CollectorError, match="401"):
        Client(collector.addresses.query).enqueue([{"input": 1}])
    assert Client(collector.addresses.query, auth_token="s3cret").enqueue([{"input": 1}])


def test_many_reports_in_one_request(start_collector) -> None:
    client = Client(start_collector().addresses.query)
    queued = client.enqueue([{"input": i, "max_attempts": 1} for i in range(3)])
    client.claim("r", max_attempts=3, wait_s=0)
    reports = [
        {"rollout_id": queued[0]["rollout_id"], "attempt_id": "at-1", "status": "succeeded", "reward": 1},
        {"rollout_id": queued[1]["rollout_id"], "attempt_id": "at-1", "status": "failed", "error": "x"},
        {"rollout_id": "unknown", "attempt_id": "at-1", "status": "succeeded"},
    ]
    assert client.complete_many(reports) == [
        {"accepted": True, "rollout_status": "succeeded"},
        {"accepted": True, "rollout_status": "failed"},
        {"accepted": False, "rollout_status": None},
    ]
    assert client.queue_stats() == {
        "queuing": 0,
        "running": 1,
        "succeeded": 1,
        "failed": 1,
        "timeout": 0,
        "cancelled": 0,
    }


def test_a_parked_claim_whose_runner_left_takes_nothing(start_collector) -> None:
    """Issue 72's first defect: a claim long-polling when its runner went away (stopped, killed: its connection
    closed) claimed the next rollout enqueued, which then waited out the heartbeat timeout on a runner that no longer
    existed. The collector now sees the connection gone and claims nothing for it."""
    collector = start_collector(heartbeat_timeout_s=30.0)
    url = collector.addresses.query
    with pytest.raises(httpx.TimeoutException):  # a runner that leaves while its claim is parked
        httpx.post(f"{url}/v1/queue/claim", json={"runner_id": "gone", "max": 4, "wait_s": 20}, timeout=1.0)
    time.sleep(0.5)
    client = Client(url)
    (queued,) = client.enqueue([{"input": {"q": 1}}])
    time.sleep(1.5)  # the parked claim wakes on the enqueue, and sees its client gone
    assert client.rollout(queued["rollout_id"])["status"] == "queuing"
    (attempt,) = client.claim("here", wait_s=5)["attempts"]  # a runner that is there gets it, at once
    assert attempt["rollout_id"] == queued["rollout_id"]
