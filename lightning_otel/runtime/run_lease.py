"""`RunLease`: a training's hold on its run on the collector. Started with the run, renewed from a thread while the
training lives, given up when it ends. A trainer that dies stops renewing: past `lease_s` the collector ends the run
(`lost`), cancels its rollouts, and the runners serving it stop, so nothing runs for a training that is gone and no
other training on the collector is touched.
"""

from __future__ import annotations

import logging
import threading

from lightning_otel.collector.client import Client, CollectorError

log = logging.getLogger("lightning_otel.trainer")


class RunLost(RuntimeError):
    """The collector ended this training's run (its lease lapsed, or someone ended it): its rollouts were cancelled."""


class RunLease:
    """Holds run `run_id` on the collector `client` talks to: `start` (the unfinished rollouts of runs no longer
    running are cancelled then; how many is returned), renewals every `lease_s / 6` from a daemon thread on a client
    of its own (until `end`, or until the training's client is closed), `end`. `check()` raises `RunLost` once the
    collector says the run is no longer running."""

    def __init__(self, client: Client, run_id: str, lease_s: float = 60.0) -> None:
        self.client = client
        self.run_id = run_id
        self.lease_s = lease_s
        self.lost: str | None = None  # why, once the collector no longer holds the run
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> int:
        answer = self.client.start_run(self.run_id, lease_s=self.lease_s)
        self._thread = threading.Thread(target=self._renew, name=f"agl-lease-{self.run_id}", daemon=True)
        self._thread.start()
        return int(answer["cancelled"])

    def _renew(self) -> None:
        interval = self.lease_s / 6
        # A client of its own (the training's may be in a long request) that gives up within a third of the lease,
        # so a renewal that failed is tried again well before the lease lapses.
        with Client(self.client.url, auth_token=self.client.auth_token, timeout=interval,
                    retry_for_s=self.lease_s / 3) as client:  # fmt: skip
            while not self._stop.wait(interval):
                if self.client.closed:  # the training's own client is closed: the training is over
                    return
                try:
                    run = client.renew_run(self.run_id)
                except CollectorError as exc:
                    log.warning("renewing run %s's lease failed (trying again in %.0f s): %s", self.run_id,
                                interval, exc)  # fmt: skip
                    continue
                if run["state"] != "running":
                    self.lost = (
                        f"the collector ended run {self.run_id} ({run['state']}): its lease of {self.lease_s:.0f} s "
                        "lapsed (this process could not renew it) or it was ended from outside; its rollouts were "
                        "cancelled"
                    )
                    log.error("%s", self.lost)
                    return

    def check(self) -> None:
        if self.lost is not None:
            raise RunLost(self.lost)

    def end(self, state: str) -> int:
        """Stop renewing and end the run (`finished` or `failed`); returns how many rollouts that cancelled."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.lost is not None:
            return 0
        return int(self.client.end_run(self.run_id, state)["cancelled"])


__all__ = ["RunLease", "RunLost"]
