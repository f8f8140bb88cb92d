"""The ingest pipeline's commit notifications: a reader never misses a commit that lands between its query and
its wait (the race that would make `wait_for_rollout` sit until its timeout)."""

from __future__ import annotations

import asyncio
import time

from lightning_otel.collector.receiving.ingest import Ingestor
from lightning_otel.collector.receiving.otlp_decoding import records_of
from lightning_otel.testing.otlp_factory import make_request, make_span


async def test_commit_between_query_and_wait_is_not_missed(span_store) -> None:
    ingestor = Ingestor(span_store)
    before = ingestor.commit_generation
    await ingestor.ingest(records_of(make_request([make_span(1, 1, rollout="r")])))  # lands "after the query"
    started = time.monotonic()
    assert await ingestor.wait_for_commit(5.0, after=before)
    assert time.monotonic() - started < 0.1
    assert not await ingestor.wait_for_commit(0.05, after=ingestor.commit_generation)  # nothing new: times out


async def test_waiters_are_woken_by_a_later_commit(span_store) -> None:
    ingestor = Ingestor(span_store)
    generation = ingestor.commit_generation
    waiters = [asyncio.create_task(ingestor.wait_for_commit(5.0, after=generation)) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiters)
    await ingestor.ingest(records_of(make_request([make_span(2, 1)])))
    assert await asyncio.wait_for(asyncio.gather(*waiters), 1.0) == [True, True, True]
    duplicate = await ingestor.ingest(records_of(make_request([make_span(2, 1)])))
    assert duplicate.duplicates == 1 and ingestor.commit_generation == generation + 1  # nothing new stored
