"""The body of a runner that runs as a Ray actor: the runner room's process, placed by Ray on some node of a
cluster (`runtime.ray_runners.RayRunnerPool` places and watches them). Like a local runner process it loads only
the runner, the agent's API, capture and the collector's client, never the trainer's orchestration."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning_otel.agent_api.lit_agent import LitAgent
    from lightning_otel.runner.runner_options import RunnerOptions


def collector_for_node(collectors: str | Mapping[str, str] | None, default: str, node_id: str, node_ip: str) -> str:
    """The collector a runner on this node talks to: `collectors` by node id, then by IP, then `"*"`, else default."""
    if collectors is None:
        return default
    if isinstance(collectors, str):
        return collectors
    for key in (node_id, node_ip, "*"):
        if key in collectors:
            return collectors[key]
    return default


class RunnerActor:
    """The body of one runner actor (made a Ray actor by `RayRunnerPool`): `serve` runs a runner until `stop`; a
    threaded actor (two calls at once) so that `stop` reaches a serving runner."""

    def __init__(self, agent: LitAgent, collectors: str | Mapping[str, str] | None, default: str,
                 options: RunnerOptions) -> None:  # fmt: skip
        import ray

        from lightning_otel.runner.runner_environment import apply_offline_defaults

        apply_offline_defaults()
        context = ray.get_runtime_context()
        self.node_id = context.get_node_id()
        self.node_ip = ray.util.get_node_ip_address()
        self.collector_url = collector_for_node(collectors, default, self.node_id, self.node_ip)
        self.agent, self.options = agent, options
        self._runner: Any = None
        self._exporter: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_asked = threading.Event()

    def where(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "node_ip": self.node_ip, "pid": os.getpid(), "collector": self.collector_url}

    def serve(self, runner_id: str) -> dict[str, Any]:
        from lightning_otel.capture.setup import flush as flush_spans
        from lightning_otel.runner.runner_process import instrumented_runner

        if self._runner is None:  # instrument once per actor process
            self._runner, self._exporter = instrumented_runner(self.agent, self.collector_url, self.options)
        self._runner.runner_id = runner_id

        async def main() -> Any:
            self._loop = asyncio.get_running_loop()
            if self._stop_asked.is_set():
                self._runner.stop()
            return await self._runner.run()

        try:
            stats = asyncio.run(main())
        finally:
            self._loop = None
            flush_spans(5_000 if self._stop_asked.is_set() else 30_000)
        return asdict(stats)

    def stop(self) -> None:
        self._stop_asked.set()
        if self._exporter is not None:
            self._exporter.retry_for_s = 0.0
        loop, runner = self._loop, self._runner
        if loop is not None and runner is not None:
            loop.call_soon_threadsafe(runner.stop)


__all__ = ["RunnerActor", "collector_for_node"]
