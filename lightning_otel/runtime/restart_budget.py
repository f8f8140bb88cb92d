"""`RestartBudget`: how many runner deaths a training rides out. A runner that dies after it has served a while (a
node lost, a process killed) is replaced however often that happens over a long run; runners that die young (within
`young_s` of starting: an agent that fails to import, a crash at start) and keep doing so, more than `limit` times
within `window_s`, stop the training with one line, as systemd's StartLimitBurst/StartLimitIntervalSec does for a
service. A lifetime count stopped 30-minute chaos runs whose Ray runner was killed 10-13 times, minutes apart; a
5-minute window over every death stopped one whose runner was killed 4 times in 5 minutes (docs/reliability.md)."""

from __future__ import annotations

import time
from collections import deque


class RunnersKeepDying(RuntimeError):
    """More young runner deaths within the window than the training rides out: something kills each runner at start."""


class RestartBudget:
    def __init__(self, limit: int, window_s: float = 300.0, young_s: float = 60.0) -> None:
        if limit < 1 or window_s <= 0 or young_s <= 0:
            raise ValueError(f"a restart budget needs limit >= 1, window_s > 0 and young_s > 0, got {limit}, "
                             f"{window_s}, {young_s}")  # fmt: skip
        self.limit, self.window_s, self.young_s = limit, window_s, young_s
        self.deaths = 0  # over the whole training, for what is said
        self._young: deque[float] = deque()  # when each recent young death was

    def spend(self, what: str, lived_s: float, now: float | None = None) -> None:
        """Count one death of a runner that lived `lived_s` (`what` says it); raise `RunnersKeepDying` when the young
        ones are more than `limit` in the window."""
        now = time.monotonic() if now is None else now
        self.deaths += 1
        if lived_s >= self.young_s:  # it served a while: killed from outside, not failing at start
            return
        self._young.append(now)
        while self._young and self._young[0] <= now - self.window_s:
            self._young.popleft()
        if len(self._young) > self.limit:
            raise RunnersKeepDying(
                f"runners died {len(self._young)} times within {self.young_s:.0f} s of starting in the last "
                f"{self.window_s:.0f} s (more than {self.limit}; {self.deaths} deaths in the whole training); the "
                f"last: {what}"
            )


__all__ = ["RestartBudget", "RunnersKeepDying"]
