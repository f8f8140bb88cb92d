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
    """One worker thread running jobs in submission order; `drain()` waits for everything submitted before it."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._exit_registered = False
        if hasattr(os, "register_at_fork"):  # a forked child has the queue but not the thread: start afresh
            os.register_at_fork(after_in_child=self._forget_thread)

    def submit(self, job: Callable[[], None]) -> None:
        """Queue `job` (no lock, no system call: this runs on the agent's hot path)."""
        if self._thread is None:
            self._start()
        self._queue.put(job)

    def _forget_thread(self) -> None:
        self._queue = queue.SimpleQueue()
        self._thread = None
        self._start_lock = threading.Lock()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is not None:
                return
            if not self._exit_registered:
                atexit.register(self.drain, 5.0)
                self._exit_registered = True
            thread = threading.Thread(target=self._run, args=(self._queue,), name="lightning-otel-span-finisher")
            thread.daemon = True
            thread.start()
            self._thread = thread

    @staticmethod
    def _run(jobs: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            job = jobs.get()
            try:
                job()
            except Exception:
                logger.exception("lightning-otel: could not finish a span")

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every job submitted before this call has run; False if `timeout_s` passed first."""
        if self._thread is None:
            return True
        reached = threading.Event()
        self._queue.put(reached.set)  # jobs run in order: when this one runs, every earlier one has
        return reached.wait(timeout_s)


finisher = SpanFinisher()
