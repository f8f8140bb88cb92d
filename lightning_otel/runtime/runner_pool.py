"""`RunnerPool`: the Trainer's runner processes on this machine (`Trainer(n_runners=...)`): started, watched,
restarted when one dies, stopped at the end. Ray actors instead: `RayRunnerPool` (ray_runners), the same interface."""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
import uuid

from lightning_otel.agent_api.lit_agent import LitAgent
from lightning_otel.collector.client import Client
from lightning_otel.runner.runner_environment import offline_defaults_for_children
from lightning_otel.runner.runner_options import RunnerOptions
from lightning_otel.runner.runner_process import runner_main
from lightning_otel.runtime.restart_budget import RestartBudget, RunnersKeepDying

log = logging.getLogger("lightning_otel.runtime.trainer")


class RunnerPool:
    """The trainer's runner processes: started with `spawn` (the trainer has threads; fork would copy their
    locks), watched, and restarted when one dies. A dead runner's attempts are failed at once so they retry. With
    `max_rollouts`, a runner that ran that many exits and is not replaced; when all have, waiting is an error."""

    def __init__(
        self,
        agent: LitAgent,
        client: Client,
        collector_url: str,
        options: RunnerOptions,
        *,
        n_runners: int,
        max_restarts: int,
    ) -> None:
        self.agent = agent
        self.client = client
        self.collector_url = collector_url
        self.options = options
        self.n_runners = n_runners
        self.budget = RestartBudget(max_restarts)  # young deaths ridden out within its window
        self._started_at: dict[str, float] = {}  # when each runner process started
        self.retired = 0  # runners that ran max_rollouts and exited
        self.processes: dict[str, multiprocessing.process.BaseProcess] = {}
        self._context = multiprocessing.get_context("spawn")
        self._session = uuid.uuid4().hex[:6]
        self._started = 0
        self._lock = threading.Lock()

    def start(self) -> None:
        for _ in range(self.n_runners):
            self._spawn()

    def _spawn(self) -> None:
        self._started += 1
        runner_id = f"runner-{self._session}-{self._started}"
        process = self._context.Process(
            target=runner_main,  # the runner room's: a runner process loads none of the trainer's orchestration
            args=(self.agent, self.collector_url, runner_id, self.options, os.getpid()),
            name=runner_id,
            daemon=True,
        )
        with offline_defaults_for_children():
            process.start()
        self.processes[runner_id] = process
        self._started_at[runner_id] = time.monotonic()

    def check(self) -> None:
        """Replace runners that died (their attempts fail now and retry); raise when they keep dying."""
        with self._lock:
            for runner_id, process in list(self.processes.items()):
                if process.is_alive():
                    continue
                del self.processes[runner_id]
                if self.options.max_rollouts is not None and process.exitcode == 0:
                    self.retired += 1
                    log.info("%s ran its max_rollouts=%d and exited", runner_id, self.options.max_rollouts)
                    continue
                failed = self.client.runner_lost(runner_id, f"runner process exited with code {process.exitcode}")
                log.warning(
                    "%s exited (code %s); %d running attempts failed and will retry",
                    runner_id,
                    process.exitcode,
                    failed,
                )
                try:
                    lived = time.monotonic() - self._started_at.pop(runner_id, time.monotonic())
                    self.budget.spend(f"{runner_id} exited with code {process.exitcode} after {lived:.0f} s", lived)
                except RunnersKeepDying as dying:
                    raise RunnersKeepDying(
                        f"{dying}; see their output above. A script that starts a Trainer needs `if __name__ == "
                        '"__main__":` around it (runners are spawned processes that import the main module)'
                    ) from None
                self._spawn()
            if self.n_runners and not self.processes and self.retired:
                raise RuntimeError(
                    f"all {self.n_runners} runners ran max_rollouts={self.options.max_rollouts} rollouts and exited "
                    "while rollouts are still waiting: raise Trainer(max_rollouts=...) or leave it None"
                )

    def stop(self, timeout: float = 15.0) -> None:
        for process in self.processes.values():
            if process.is_alive():
                process.terminate()  # SIGTERM: the runner cancels its rollouts, reports them and flushes
        deadline = time.monotonic() + timeout
        for process in self.processes.values():
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(5)
        # A stopped runner may still have a claim parked in the collector (a long-poll its death did not end): marked
        # lost, that claim returns nothing, so the next session on this collector is not handed to a dead runner.
        for runner_id in self.processes:
            try:
                self.client.runner_lost(runner_id, "runner stopped at the end of its Trainer session")
            except Exception as exc:  # the collector may be gone already; its claims went with it
                log.debug("could not mark %s lost: %s", runner_id, exc)
        self.processes.clear()
