"""The policy gateway's hold on requests while the policy's weights change: refused (`pause`: 503 + Retry-After,
a synchronous update) or kept waiting (`held`: asynchronous training's swap, the requests in flight drained first).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator


class WeightHold:
    """Counts the requests in flight (a stream until its last byte) and holds new ones while weights change."""

    def __init__(self) -> None:
        self.paused = False  # pause(): new requests are refused with a 503
        self._held = False  # held(): new requests wait (not refused) while the weights change
        self._in_flight = 0
        self._lock = threading.Lock()
        self.held_s_total = 0.0  # time spent held (the weight swaps of asynchronous training)

    @contextlib.contextmanager
    def held(self, drain_timeout_s: float = 600.0) -> Iterator[int]:
        """New requests wait; the ones in flight finish on the old weights (the block starts when none is left, or
        after `drain_timeout_s`); then requests resume on the new ones. Yields how many were in flight."""
        began = time.monotonic()
        self._held = True
        with self._lock:
            in_flight = self._in_flight
        try:
            deadline = began + drain_timeout_s
            while self._in_flight and time.monotonic() < deadline:
                time.sleep(0.005)
            yield in_flight
        finally:
            self._held = False
            self.held_s_total += time.monotonic() - began

    async def enter(self) -> None:
        """Count a request in flight, after any hold (a hold that starts now waits for it)."""
        while True:
            with self._lock:
                if not self._held:
                    self._in_flight += 1
                    return
            await asyncio.sleep(0.005)

    def leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def leave_once(self) -> Callable[[], None]:
        """A stream's leave: called when its last byte is sent, or when the response is dropped unsent (a client
        gone before the body started), whichever comes first; only the first call counts."""
        left = threading.Event()

        def leave() -> None:
            if not left.is_set():
                left.set()
                self.leave()

        return leave


__all__ = ["WeightHold"]
