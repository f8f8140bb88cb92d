"""Ends LLM spans on a background thread, so the agent's hot path does not pay for token-id attributes.

Setting a 2,000-token id list as a span attribute costs the OpenTelemetry SDK about half a millisecond (it
validates every element). An LLM call's span therefore captures its end time on the caller's thread and hands
"set these attributes, end at that time" to this single worker. `lightning_otel.flush()` drains the worker
before force-flushing the provider, so a rollout's spans are complete when it returns (read-your-writes).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


class SpanFinisher:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._pending = 0
        self._done = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def submit(self, job: Callable[[], None]) -> None:
        with self._done:
            if self._pid != os.getpid():  # first use, or a forked child where the parent's thread does not exist
                self._start()
            self._pending += 1
        self._queue.put(job)

    def _start(self) -> None:
        if self._pid == 0:
            atexit.register(self.drain, 5.0)
        self._queue = queue.SimpleQueue()
        self._pending = 0
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="lightning-otel-span-finisher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        jobs = self._queue
        while True:
            job = jobs.get()
            try:
                job()
            except Exception:
                logger.exception("lightning-otel: could not finish a span")
            finally:
                with self._done:
                    self._pending -= 1
                    if self._pending == 0:
                        self._done.notify_all()

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted span has ended; False if `timeout_s` passed first."""
        with self._done:
            if self._pid != os.getpid():
                return True
            return self._done.wait_for(lambda: self._pending == 0, timeout_s)


finisher = SpanFinisher()
