"""Concurrent small requests into one batched call: what a model server (and a client in front of one) needs so
that fifty agents scoring at once cost a few forward passes, not fifty."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(slots=True)
class BatchStats:
    requests: int = 0
    items: int = 0
    batches: int = 0
    largest_batch: int = 0


class MicroBatcher(Generic[T, R]):
    """`await batcher.submit(items)` -> their results, computed by `process(all items of the batch)`.

    From idle, a batch closes `max_wait_s` after its first request or when it holds `max_batch` items; while a batch
    is processed, arrivals queue and go together as soon as it is done (no second wait). A request's items stay
    in one batch (a request larger than `max_batch` is a batch of its own). An exception in `process` fails every
    request of that batch, and only those. Needs a running event loop; one batch is processed at a time.
    """

    def __init__(
        self, process: Callable[[list[T]], Awaitable[list[R]]], *, max_batch: int = 32, max_wait_s: float = 0.005
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.process = process
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.stats = BatchStats()
        self._pending: list[tuple[list[T], asyncio.Future[list[R]]]] = []
        self._full = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def submit(self, items: list[T]) -> list[R]:
        future: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
        self._pending.append((list(items), future))
        self.stats.requests += 1
        if sum(len(pending) for pending, _ in self._pending) >= self.max_batch:
            self._full.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        async with self._lock:
            idle = True
            while self._pending:
                if idle:  # from idle, wait a little for company; after a batch, what queued meanwhile goes at once
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._full.wait(), self.max_wait_s)
                    idle = False
                self._full.clear()
                batch: list[tuple[list[T], asyncio.Future[list[R]]]] = []
                size = 0
                while self._pending and (not batch or size + len(self._pending[0][0]) <= self.max_batch):
                    request = self._pending.pop(0)
                    batch.append(request)
                    size += len(request[0])
                await self._run(batch, size)

    async def _run(self, batch: list[tuple[list[T], asyncio.Future[list[R]]]], size: int) -> None:
        self.stats.batches += 1
        self.stats.items += size
        self.stats.largest_batch = max(self.stats.largest_batch, size)
        try:
            results = await self.process([item for items, _ in batch for item in items])
            if len(results) != size:
                raise RuntimeError(f"the batch function returned {len(results)} results for {size} items")
        except Exception as exc:  # every request of this batch learns why; the next batch runs normally
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        start = 0
        for items, future in batch:
            if not future.done():  # a caller that gave up (cancelled) is skipped
                future.set_result(results[start : start + len(items)])
            start += len(items)
