"""Several collectors on one PostgreSQL: any of them serves the queue and the reads, claims stay exactly once, and a
change made through one wakes the long-polls of another at once (LISTEN/NOTIFY, not the 15 s safety re-check); one
retention pass per interval whatever the number of collectors."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import httpx
import pytest

from lightning_otel.collector import Client
from lightning_otel.collector.stores.postgres_store import PostgresStore
from lightning_otel.testing.otlp_factory import make_request, make_span
from tests.collector.helpers import PB


@pytest.fixture
def two_collectors(postgres_cluster, start_collector):
    url = postgres_cluster.create_database(f"shared_{uuid.uuid4().hex[:10]}")
    first = start_collector(store_url=url, grpc_port=None)
    second = start_collector(store_url=url, grpc_port=None)
    assert all(c.collector.rollout_state.recheck_s >= 15 for c in (first, second))  # listening: no 1 s polls
    return first, second


def timed(call):
    """Run `call` in a thread; returns (thread, box) where box gets (result, seconds) when it ends."""
    box: list = []

    def run() -> None:
        began = time.monotonic()
        box.append((call(), time.monotonic() - began))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_a_claim_parked_on_one_collector_wakes_on_an_enqueue_through_the_other(two_collectors) -> None:
    first, second = (Client(c.addresses.query) for c in two_collectors)
    thread, box = timed(lambda: second.claim("runner-b", max_attempts=1, wait_s=20))
    time.sleep(0.5)  # parked
    started = time.monotonic()
    (queued,) = first.enqueue([{"input": {"q": 1}}])
    thread.join(20)
    (answer, _), woke = box[0], time.monotonic() - started
    assert [a["rollout_id"] for a in answer["attempts"]] == [queued["rollout_id"]]
    assert woke < 2.0, woke  # the notice, not the re-check (15 s)


def test_a_wait_on_one_collector_wakes_on_a_completion_through_the_other(two_collectors) -> None:
    first, second = (Client(c.addresses.query) for c in two_collectors)
    (queued,) = first.enqueue([{"input": {"q": 1}}])
    (attempt,) = second.claim("runner-b", max_attempts=1, wait_s=5)["attempts"]
    thread, box = timed(lambda: first.wait_rollouts([queued["rollout_id"]], timeout=20))
    time.sleep(0.5)
    started = time.monotonic()
    second.complete(attempt["rollout_id"], attempt["attempt_id"], "succeeded", reward=1.0)
    thread.join(20)
    (answer, _), woke = box[0], time.monotonic() - started
    assert answer["done"] and answer["rollouts"][0]["status"] == "succeeded"
    assert woke < 2.0, woke


def test_claims_through_two_collectors_take_each_rollout_once(two_collectors) -> None:
    first, second = (Client(c.addresses.query) for c in two_collectors)
    first.enqueue([{"input": {"q": i}} for i in range(40)])
    claimed: list[str] = []

    def drain(client: Client, runner: str) -> None:
        while attempts := client.claim(runner, max_attempts=3, wait_s=0)["attempts"]:
            claimed.extend(a["rollout_id"] for a in attempts)

    threads = [threading.Thread(target=drain, args=(c, f"r{i}")) for i, c in enumerate((first, second, first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(claimed) == 40 and len(set(claimed)) == 40


def test_a_completeness_wait_on_one_collector_wakes_on_spans_ingested_by_the_other(two_collectors) -> None:
    a, b = two_collectors
    child = make_span(1, 2, parent=1, rollout="ro-shared", attempt="at-1")
    assert httpx.post(a.addresses.otlp_http + "/v1/traces", content=make_request([child]).SerializeToString(),
                      headers=PB).status_code == 200  # fmt: skip
    reader = Client(a.addresses.query)
    thread, box = timed(lambda: reader.complete_rollouts_spans(["ro-shared"], attempt_ids=["at-1"], wait_s=20))
    time.sleep(0.5)  # waiting for the parent
    started = time.monotonic()
    parent = make_span(1, 1, rollout="ro-shared", attempt="at-1")
    assert httpx.post(b.addresses.otlp_http + "/v1/traces", content=make_request([parent]).SerializeToString(),
                      headers=PB).status_code == 200  # fmt: skip
    thread.join(25)
    (answer, _), woke = box[0], time.monotonic() - started
    assert not answer["incomplete"] and len(answer["rollouts"]["ro-shared"]) == 2
    assert woke < 3.0, woke


def test_one_retention_pass_per_interval_whatever_the_number_of_collectors(postgres_cluster) -> None:
    url = postgres_cluster.create_database(f"retention_{uuid.uuid4().hex[:10]}")

    async def passes() -> list[int | None]:
        stores = [PostgresStore(url), PostgresStore(url)]
        for store in stores:
            await store.start()
        try:
            now = time.time_ns()
            return [await store.retention_pass(now, every_s=3600) for store in (*stores, stores[0])]
        finally:
            for store in stores:
                await store.close()

    first, second, again = asyncio.run(passes())
    assert first == 0 and second is None and again is None  # ran once; the others saw it done this interval
