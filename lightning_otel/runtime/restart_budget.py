"""`RestartBudget`: how many runner deaths a training rides out. A runner that dies now and then over a long run (a
node lost, a process killed) is replaced every time; runners that keep dying (an agent that fails to import, a
crash at start) use up `limit` deaths within `window_s` and the training stops with one line saying so, as systemd's
StartLimitBurst/StartLimitIntervalSec does for a service. A lifetime count stopped a 30-minute chaos run whose Ray
runner was killed 13 times, 2 to 3 minutes apart (docs/reliability.md)."""

from __future__ import annotations

import time
from collections import deque


class RunnersKeepDying(RuntimeError):
    """More runner deaths within the window than the training rides out: something kills each runner it starts."""


class RestartBudget:
    def __init__(self, limit: int, window_s: float = 300.0) -> None:
        if limit < 1 or window_s <= 0:
            raise ValueError(f"a restart budget needs limit >= 1 and window_s > 0, got {limit}, {window_s}")
        self.limit, self.window_s = limit, window_s
        self.deaths = 0  # over the whole training, for what is said
        self._recent: deque[float] = deque()

    def spend(self, what: str, now: float | None = None) -> None:
        """Count one death (`what` says it); raise `RunnersKeepDying` when it is more than `limit` in the window."""
        now = time.monotonic() if now is None else now
        self.deaths += 1
        self._recent.append(now)
        while self._recent and self._recent[0] <= now - self.window_s:
            self._recent.popleft()
        if len(self._recent) > self.limit:
            raise RunnersKeepDying(
                f"runners died {len(self._recent)} times in the last {self.window_s:.0f} s "
                f"(more than {self.limit}; {self.deaths} in the whole training); the last: {what}"
            )


__all__ = ["RestartBudget", "RunnersKeepDying"]
