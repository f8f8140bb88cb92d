"""MicroBatcher: concurrent requests share calls, each gets its own results in order, a failing batch fails only
its own requests."""

from __future__ import annotations

import asyncio

import pytest

from lightning_otel.rewards.micro_batch import MicroBatcher


async def test_concurrent_requests_share_batches_and_get_their_own_results() -> None:
    calls: list[list[int]] = []

    async def double(items: list[int]) -> list[int]:
        calls.append(items)
        await asyncio.sleep(0.01)
        return [2 * item for item in items]

    batcher = MicroBatcher(double, max_batch=8, max_wait_s=0.01)
    results = await asyncio.gather(*(batcher.submit([i, i + 100]) for i in range(20)))
    assert results == [[2 * i, 2 * (i + 100)] for i in range(20)]
    assert all(len(batch) <= 8 for batch in calls) and len(calls) <= 6  # 40 items, 4 requests per batch
    assert (batcher.stats.requests, batcher.stats.items, batcher.stats.batches) == (20, 40, len(calls))
    (alone,) = await asyncio.gather(batcher.submit(list(range(12))))  # larger than a batch: a batch of its own
    assert alone == [2 * i for i in range(12)] and batcher.stats.largest_batch == 12


async def test_an_error_fails_only_the_requests_of_its_batch() -> None:
    async def fragile(items: list[int]) -> list[int]:
        if -1 in items:
            raise ValueError("bad item")
        return items

    batcher = MicroBatcher(fragile, max_batch=2, max_wait_s=0.001)
    first = asyncio.ensure_future(batcher.submit([-1, 5]))
    second = asyncio.ensure_future(batcher.submit([7]))
    with pytest.raises(ValueError, match="bad item"):
        await first
    assert await second == [7]
    assert await batcher.submit([3]) == [3]
