"""Complete reads: a batch read waits, on commits and not on a timer, until every span of each rollout has its parent
in the store; what is still incomplete at the bound is named, never dropped."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from lightning_otel.collector import Client
from lightning_otel.testing.otlp_factory import make_span
from tests.collector.helpers import send


def _read_in_background(client: Client, rollout_ids: list[str], wait_s: float) -> tuple[threading.Thread, dict]:
    answer: dict = {}

    def read() -> None:
        started = time.monotonic()
        answer.update(client.complete_rollouts_spans(rollout_ids, attempt_ids=["a1"] * len(rollout_ids), wait_s=wait_s))
        answer["took_s"] = time.monotonic() - started

    reader = threading.Thread(target=read)
    reader.start()
    return reader, answer


def test_read_waits_for_a_late_parent_and_wakes_on_its_commit(start_collector) -> None:
    collector = start_collector()
    client = Client(collector.addresses.query)
    # the gateway's span (flushed) is there; the service's LLM span, its parent, is exported seconds later
    send(collector, [make_span(1, 11, parent=10, name="gateway chat", rollout="r1", attempt="a1")])
    send(collector, [make_span(2, 21, name="invoke_agent LitAgent", rollout="r2", attempt="a1")])
    reader, answer = _read_in_background(client, ["r1", "r2"], wait_s=20)
    time.sleep(0.5)
    assert reader.is_alive()  # still waiting for r1's parent
    send(collector, [make_span(1, 10, parent=9, name="chat", rollout="r1", attempt="a1"),
                     make_span(1, 9, name="invoke_agent Assistant", rollout="r1", attempt="a1")])  # fmt: skip
    reader.join(10)
    assert answer["incomplete"] == {}
    assert sorted(s["name"] for s in answer["rollouts"]["r1"]) == ["chat", "gateway chat", "invoke_agent Assistant"]
    assert [s["name"] for s in answer["rollouts"]["r2"]] == ["invoke_agent LitAgent"]
    assert 0.5 < answer["took_s"] < 3  # woken by the commit, long before the 20 s bound


def test_parent_partly_arrived_keeps_waiting(start_collector) -> None:
    collector = start_collector()
    client = Client(collector.addresses.query)
    send(collector, [make_span(1, 11, parent=10, rollout="r1", attempt="a1")])
    reader, answer = _read_in_background(client, ["r1"], wait_s=20)
    time.sleep(0.3)
    send(collector, [make_span(1, 10, parent=9, rollout="r1", attempt="a1")])  # the LLM span, its agent span later
    time.sleep(0.3)
    assert reader.is_alive()
    send(collector, [make_span(1, 9, rollout="r1", attempt="a1")])
    reader.join(10)
    assert answer["incomplete"] == {} and len(answer["rollouts"]["r1"]) == 3


def test_parent_outside_the_rollout_counts_when_stored_in_the_trace(start_collector) -> None:
    collector = start_collector()
    client = Client(collector.addresses.query)
    # a service instrumented without the rollout's baggage: its span has no rollout id, but it is the parent
    send(collector, [make_span(1, 10, name="POST /chat"), make_span(1, 11, parent=10, rollout="r1", attempt="a1")])
    started = time.monotonic()
    answer = client.complete_rollouts_spans(["r1"], attempt_ids=["a1"], wait_s=20)
    assert answer["incomplete"] == {} and time.monotonic() - started < 2


def test_incomplete_at_the_bound_is_named_and_its_spans_returned(start_collector) -> None:
    collector = start_collector()
    client = Client(collector.addresses.query)
    send(collector, [make_span(1, 11, parent=10, rollout="r1", attempt="a1"),
                     make_span(1, 12, parent=13, rollout="r1", attempt="a1")])  # fmt: skip
    started = time.monotonic()
    answer = client.complete_rollouts_spans(["r1"], attempt_ids=["a1"], wait_s=0.5)
    assert 0.5 <= time.monotonic() - started < 3
    assert answer["incomplete"] == {"r1": 2} and len(answer["rollouts"]["r1"]) == 2
    # without a wait the read answers at once, as before
    assert client.rollouts_spans(["r1"], attempt_ids=["a1"]) == answer["rollouts"]


@pytest.mark.parametrize("wait", [-1, 301, "5", True])
def test_bad_wait_is_a_400(start_collector, wait) -> None:
    collector = start_collector()
    reply = httpx.post(
        collector.addresses.query + "/v1/rollouts/spans",
        json={"rollouts": [{"rollout_id": "r"}], "wait_complete_s": wait},
    )
    assert reply.status_code == 400 and "wait_complete_s" in reply.text
    assert Client(collector.addresses.query).healthy()
