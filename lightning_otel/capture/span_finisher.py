"""Ends LLM spans on a background thread, so the agent's hot path does not pay for token-id attributes.

Setting a 2,000-token id list as a span attribute costs the OpenTelemetry SDK about half a millisecond (it
validates every element). An LLM call's span therefore captures its end time on the caller's thread and hands
"set these attributes, end at that time" to this single worker. `lightning_otel.flush()` drains the worker
before force-flushing the provider, so a rollout's spans are complete when it returns (read-your-writes).

The worker gathers: woken by a job, it waits `GATHER_S` (or until a drain) and then runs every job queued. Waking
a thread for each call and trading the GIL back and forth cost more CPU than the job itself for calls with a few
hundred token ids (~0.3 ms a call against ~0.2 ms for running the jobs inline, 8 async calls at once on two cores);
gathered, the jobs cost about what they cost inline, and long id lists still stay off the caller's thread.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)
# How long the worker, woken by a job, waits for more before running them; a drain ends the wait. Spans end no
# later for it (the end time is taken on the caller's thread) and are exported every few seconds anyway.
GATHER_S = 0.05


class SpanFinisher:
    """One worker thread running jobs in submission order; `drain()` waits for everything submitted before it."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._hurry = threading.Event()  # a drain is waiting: run what is queued now
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
        self._hurry = threading.Event()
        self._thread = None
        self._start_lock = threading.Lock()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is not None:
                return
            if not self._exit_registered:
                atexit.register(self.drain, 5.0)
                self._exit_registered = True
            thread = threading.Thread(
                target=self._run, args=(self._queue, self._hurry), name="lightning-otel-span-finisher"
            )
            thread.daemon = True
            thread.start()
            self._thread = thread

    @staticmethod
    def _run(jobs: queue.SimpleQueue[Callable[[], None]], hurry: threading.Event) -> None:
        while True:
            job: Callable[[], None] | None = jobs.get()
            hurry.wait(GATHER_S)  # more jobs queue meanwhile without waking this thread
            hurry.clear()
            while job is not None:
                try:
                    job()
                except Exception:
                    logger.exception("lightning-otel: could not finish a span")
                try:
                    job = jobs.get_nowait()
                except queue.Empty:
                    job = None

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every job submitted before this call has run; False if `timeout_s` passed first."""
        if self._thread is None:
            return True
        reached = threading.Event()
        self._queue.put(reached.set)  # jobs run in order: when this one runs, every earlier one has
        self._hurry.set()
        return reached.wait(timeout_s)


finisher = SpanFinisher()
