"""A runner process's main: instrument the process to export to the collector, run a `Runner` until SIGTERM/Ctrl-C
(or the training's end, or `max_rollouts`), flush what is left. The Trainer's runner processes, `lightning-otel
runner`, a script's `runner` command (`run_runner_processes`) and Ray runner actors (`instrumented_runner`) start
runners this way.

    options = agl.RunnerOptions(max_concurrency=8)
    agl.run_runner_processes(agent, "http://trainer-host:16686", n_runners=2, options=options)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

from lightning_otel.agent_api.lit_agent import LitAgent
from lightning_otel.runner.runner import Runner, RunnerStats
from lightning_otel.runner.runner_gc import settle_heap
from lightning_otel.runner.runner_options import RunnerOptions


def instrumented_runner(
    agent: LitAgent, collector_url: str, options: RunnerOptions, *, runner_id: str | None = None
) -> tuple[Runner, Any]:
    """Instrument this process to export to the collector (its OTLP endpoint asked of it unless the options give
    one) and build a Runner: the part of a runner process's main that a runner elsewhere (a Ray actor) shares.
    Returns the runner and its span exporter (a stopping runner lowers the exporter's `retry_for_s`)."""
    from lightning_otel.agent_api.harness_env import set_runner_export
    from lightning_otel.capture import genai_events
    from lightning_otel.capture.otlp_exporters import otlp_http_exporter
    from lightning_otel.capture.setup import instrument
    from lightning_otel.collector.client import DEFAULT_RETRY_FOR_S, Client, otlp_endpoint_for

    endpoint = options.otlp_endpoint
    if endpoint is None:
        with Client(collector_url, auth_token=options.auth_token, timeout=10) as client:
            endpoint = otlp_endpoint_for(collector_url, client.collector_info())
    # An explicit exporter: a runner always reports to its collector, whatever OTEL_TRACES_EXPORTER says.
    # spans ride out a collector restart or store outage as long as the runner's own requests do
    exporter = otlp_http_exporter(endpoint, auth_token=options.auth_token, retry_for_s=DEFAULT_RETRY_FOR_S)
    state = instrument(exporter=exporter, capture_content=options.capture_content)
    # with the latest GenAI conventions opted into, the operation-details events go to the collector as log records
    genai_events.start(endpoint, headers={"authorization": f"Bearer {options.auth_token}"} if options.auth_token
                       else None, resource=getattr(state.tracer_provider, "resource", None))  # fmt: skip
    set_runner_export(endpoint, options.auth_token)  # harnesses this runner starts send their spans there too
    return Runner(agent, collector_url, options, runner_id=runner_id), exporter


def run_runner_process(
    agent: LitAgent, collector_url: str, options: RunnerOptions | None = None, *, runner_id: str | None = None,
    parent_pid: int | None = None,
) -> RunnerStats:  # fmt: skip
    """A runner process's main: instrument, run until SIGTERM/Ctrl-C, flush (see the module docstring). A runner
    its trainer started (`parent_pid`) whose trainer died ends at once and says so in one line: its collector, the
    trainer's, is gone with it, and its terminal is the dead trainer's."""
    from lightning_otel.capture.setup import flush as flush_spans

    runner, exporter = instrumented_runner(agent, collector_url, options or RunnerOptions(), runner_id=runner_id)
    stopping = False

    def stop() -> None:  # SIGTERM/Ctrl-C: spans still unsent go once more, not for minutes
        nonlocal stopping
        stopping = True
        orphaned = parent_pid is not None and os.getppid() != parent_pid
        if orphaned:
            _quiet_after_the_trainer_died(exporter)
        runner.stop(collector_gone=orphaned)
        exporter.retry_for_s = 0.0

    async def main() -> RunnerStats:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, stop)
        return await runner.run()

    settle_heap()  # the agent and the instrumentation are loaded: what is alive now lives as long as the process
    try:
        return asyncio.run(main())
    finally:
        flush_spans(5_000 if stopping else 30_000)
        if stopping:
            _exit_past_hung_agents(runner)


def _quiet_after_the_trainer_died(exporter: Any) -> None:
    """One line, then nothing more of the reports and spans that have nowhere to go: the exporter stops sending
    (its batches and the SDK's retries end now) and this dying process's warnings are left unsaid."""
    import logging

    logging.getLogger("lightning_otel.runner").warning("the trainer is gone: stopping now, reporting nothing more")
    exporter.shutdown()
    for name in ("lightning_otel", "opentelemetry"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _exit_past_hung_agents(runner: Runner) -> None:
    """A stopped runner whose synchronous agent still runs in a thread (it does not return: a hung call, a long
    sleep) would wait for it at interpreter exit, forever for all its trainer knows: its rollouts are reported and its
    spans flushed by now, so it exits without waiting."""
    import logging
    import os
    import sys

    hung = runner.agent_calls_in_threads()
    if hung:
        logging.getLogger("lightning_otel.runner").warning(
            "stopped with %d agent calls still running (a synchronous agent that has not returned): exiting "
            "without waiting for them", hung,
        )  # fmt: skip
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def runner_main(
    agent: LitAgent, collector_url: str, runner_id: str, options: RunnerOptions, parent_pid: int | None = None
) -> None:
    """The target of a runner process the Trainer spawns: it ends with the trainer (`end_with_parent`), its log
    lines name it; then `run_runner_process`."""
    import logging

    logging.basicConfig(level=logging.WARNING, format=f"[{runner_id}] %(levelname)s %(name)s: %(message)s")
    if parent_pid is not None:
        end_with_parent(parent_pid)
    run_runner_process(agent, collector_url, options, runner_id=runner_id, parent_pid=parent_pid)


def end_with_parent(parent_pid: int) -> None:
    """Have the kernel send this process SIGTERM when its parent (the trainer) dies, however it dies (Linux's
    parent-death signal); a parent gone before this line ran is caught by the pid check. Elsewhere the run's lease
    ends the runner: its run ends when the trainer stops renewing it."""
    import ctypes
    import os
    import sys

    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):  # no prctl to be had: the lease still ends the runner
        return
    if os.getppid() != parent_pid:  # the trainer died before the signal was asked for
        os.kill(os.getpid(), signal.SIGTERM)


def run_runner_processes(
    agent: LitAgent, collector_url: str, *, n_runners: int = 1, options: RunnerOptions | None = None
) -> int:
    """`n_runners` runner processes (`run_runner_process` with `options`) for a script's `runner` command: one runs
    in this process, more are spawned (`agent` must then be importable by name: defined at a module's top level).
    Returns the worst exit code."""
    import multiprocessing

    if n_runners <= 1:
        run_runner_process(agent, collector_url, options)
        return 0
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=run_runner_process, args=(agent, collector_url, options))
                 for _ in range(n_runners)]  # fmt: skip
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    return max(process.exitcode or 0 for process in processes)


__all__ = ["instrumented_runner", "run_runner_process", "run_runner_processes", "runner_main"]
