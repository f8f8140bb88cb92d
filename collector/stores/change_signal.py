"""A generation counter waiters can sleep on: the collector's way to wake readers on writes instead of polling.

    generation = signal.generation      # read before the query
    ... query ...
    await signal.wait(timeout_s, after=generation)   # returns at once if something changed meanwhile

Reading the generation before the query means a change that lands between the query and the wait is never missed.
Single event loop only (the collector's).
"""

from __future__ import annotations

import asyncio


class ChangeSignal:
    def __init__(self) -> None:
        self._generation = 0
        self._changed: asyncio.Future[None] | None = None

    @property
    def generation(self) -> int:
        return self._generation

    def notify(self) -> None:
        self._generation += 1
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)

    async def wait(self, timeout_s: float, *, after: int) -> bool:
        """Sleep until a change newer than generation `after`, or `timeout_s`; False on timeout."""
        if self._generation != after:
            return True
        if timeout_s <= 0:
            return False
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._changed), timeout_s)
        except TimeoutError:
            return False
        return True
