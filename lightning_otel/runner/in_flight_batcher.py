"""`InFlightBatcher`: calls arriving while one send is in flight wait and go together in the next (a runner's span
flushes and completion reports: rollouts that finish together share one HTTP round trip and one store
transaction)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class InFlightBatcher(Generic[T, R]):
    """Calls arriving while one `send` is in flight wait and go together in the next: rollouts that finish
    together share one span flush and one completion request. With `gather_s`, a send also waits that long for
    more while `more_coming()`; with nothing more coming it goes at once."""

    def __init__(
        self,
        send: Callable[[list[T]], Awaitable[list[R]]],
        *,
        gather_s: float = 0.0,
        more_coming: Callable[[], bool] = lambda: False,
    ) -> None:
        self._send = send
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._running = False
        # Before a send, wait `gather_s` for more calls while `more_coming()` says others may join; `wake()` ends
        # the wait early (nothing more is coming).
        self._gather_s = gather_s
        self._more_coming = more_coming
        self._woken: asyncio.Event | None = None

    def wake(self) -> None:
        if self._woken is not None:
            self._woken.set()

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if not self._running:
            self._running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        try:
            while self._pending:
                if self._gather_s > 0 and self._more_coming():
                    self._woken = asyncio.Event()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._woken.wait(), self._gather_s)
                    self._woken = None
                batch, self._pending = self._pending, []
                try:
                    results = await self._send([item for item, _ in batch])
                except Exception as exc:
                    for _, future in batch:
                        future.set_exception(exc)
                    continue
                for (_, future), result in zip(batch, results, strict=True):
                    future.set_result(result)
        finally:
            self._running = False
