"""`RunFollower`: which run a runner serves, and when it stops, read from its claims' answers.

A runner serves one run at a time: the one it was started for (`RunnerOptions.run_id`: the Trainer's runners), or
the one the queue chose for it (the run of the oldest rollout waiting), which it then follows. When its run ends
(finished, failed, or lost because its trainer died), a runner started for it stops; one that chose it stops too
(`stop_when_training_ends`, `lightning-otel runner`'s default) or takes the next run. Each of these is said once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from lightning_otel.runner.runner_options import RunnerOptions

log = logging.getLogger("lightning_otel.runner")


class RunFollower:
    def __init__(self, options: RunnerOptions) -> None:
        self.serving = options.run_id
        self.pinned = options.run_id is not None
        self.stop_when_ends = options.stop_when_training_ends
        self.idle_stop_s = options.idle_stop_s
        self._idle_since = time.monotonic()
        self._said_waiting = False
        self.ended_state: str | None = None  # how the run it served ended, once it did

    def after_claim(self, answer: dict[str, Any], busy: bool) -> str | None:
        """Follow the run a claim's answer names; returns why this runner should stop, or None to go on. `busy`:
        attempts of this runner still run."""
        run, attempts = answer.get("run"), answer.get("attempts") or []
        if attempts or busy:
            self._idle_since = time.monotonic()
            if attempts and self.serving is None and run is not None:
                self.serving = run["run_id"]
                log.info("serving run %s (the oldest waiting on this collector)", self.serving)
            return None
        if self.serving is not None and run is not None and run.get("run_id") == self.serving:
            state = run.get("state")
            if state == "unknown":
                if not self._said_waiting:
                    log.warning("run %s is not on this collector yet: waiting for it to start", self.serving)
                    self._said_waiting = True
                return None
            if state != "running":
                self.ended_state = state
                ended = f"the run this runner served, {self.serving}, ended ({state})"
                if self.pinned:  # started for this run: its end is the runner's
                    return f"{ended}: stopping"
                if self.stop_when_ends:
                    return f"{ended}: stopping (--keep-serving to take the next run)"
                log.warning("%s: taking the next run", ended)
                self.serving, self._idle_since = None, time.monotonic()
                return None
        idle = time.monotonic() - self._idle_since
        if self.stop_when_ends and not self.pinned and idle >= self.idle_stop_s and answer.get("live_runs") == 0:
            return (
                f"no work for {idle:.0f} s and no run is live on this collector (none started, or it ended): "
                "stopping (--keep-serving to stay)"
            )
        return None


__all__ = ["RunFollower"]
