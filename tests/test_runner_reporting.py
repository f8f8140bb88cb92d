"""A runner frees a rollout's slot when its agent returns; flushes and reports go in the background, gathered."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import lightning_otel
from lightning_otel.collector import Client, EmbeddedCollector
from lightning_otel.collector.client import AsyncClient
from lightning_otel.runner.runner import REPORT_GATHER_S, Runner
from lightning_otel.runner.runner_options import RunnerOptions


def _run(agent: Any, tasks: list[dict[str, Any]], folder: Path, **options: Any) -> tuple[Runner, list[dict]]:
    with EmbeddedCollector.on_sqlite_file(folder / "collector.sqlite3") as addresses, Client(addresses.query) as client:
        queued = client.enqueue([{"input": task} for task in tasks])
        flush = options.pop("flush", None)
        settings = RunnerOptions(max_rollouts=len(tasks), **options)
        runner = Runner(agent, addresses.query, settings, flush=flush)
        asyncio.run(asyncio.wait_for(runner.run(), 30))
        return runner, [client.rollout(r["rollout_id"]) for r in queued]


def test_the_next_rollout_runs_while_the_last_ones_spans_are_still_being_flushed(tmp_path: Path) -> None:
    """One slot: the second agent starts while the first rollout's flush is still blocked, and each rollout is
    reported succeeded only after its flush (before, the slot was held until the report was sent)."""
    second_started = threading.Event()
    flushes: list[bool] = []

    def slow_flush() -> None:
        if not flushes:
            flushes.append(second_started.wait(10))  # the first flush returns once the second agent has started
        else:
            flushes.append(True)

    @lightning_otel.rollout
    async def agent(task: dict[str, Any]) -> float:
        if task["n"] == 1:
            second_started.set()
        return 1.0

    runner, records = _run(agent, [{"n": 0}, {"n": 1}], tmp_path, max_concurrency=1, flush=slow_flush)
    assert flushes[0] is True
    assert runner.stats.succeeded == 2
    assert [r["status"] for r in records] == ["succeeded", "succeeded"]


def test_rollouts_ending_close_together_share_one_flush_and_one_completion_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four agents end ~4 ms apart: the first report waits `REPORT_GATHER_S` for the others still running, so
    they go as one flush and one request. Sent as soon as possible, a fast flush went once per rollout."""
    assert REPORT_GATHER_S >= 0.015
    flushes: list[int] = []
    started: list[float] = []

    @lightning_otel.rollout
    async def agent(task: dict[str, Any]) -> float:
        started.append(time.monotonic())
        while len(started) < 4:  # all four start, then each ends 4 ms after the one before
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.004 * task["n"])
        return 1.0

    completions: list[int] = []
    send = AsyncClient.complete_many

    async def counted(self: AsyncClient, reports: list[dict[str, Any]]) -> Any:
        completions.append(len(reports))
        return await send(self, reports)

    monkeypatch.setattr(AsyncClient, "complete_many", counted)
    _, records = _run(agent, [{"n": n} for n in range(4)], tmp_path, max_concurrency=4, flush=lambda: flushes.append(1))
    assert [r["status"] for r in records] == ["succeeded"] * 4
    assert len(flushes) <= 2 and sum(completions) == 4 and len(completions) <= 2, (flushes, completions)


def test_slots_freeing_close_together_are_claimed_in_one_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight slots whose agents end ~2 ms apart: the runner waits (at most `REPORT_GATHER_S`) until half of them are
    free and claims them together; it claimed every two slots before, twice the requests for both sides."""
    asked: list[int] = []
    claim = AsyncClient.claim

    async def counted(self: AsyncClient, runner_id: str, *, max_attempts: int = 1, **options: Any) -> Any:
        asked.append(max_attempts)
        return await claim(self, runner_id, max_attempts=max_attempts, **options)

    @lightning_otel.rollout
    async def agent(task: dict[str, Any]) -> float:
        await asyncio.sleep(0.01 + 0.002 * (task["n"] % 8))
        return 1.0

    monkeypatch.setattr(AsyncClient, "claim", counted)
    _, records = _run(agent, [{"n": n} for n in range(16)], tmp_path, max_concurrency=8)
    assert [r["status"] for r in records] == ["succeeded"] * 16
    # after the first claim, each asks for half the slots at least, or for every rollout left (max_rollouts is 16)
    assert asked[0] == 8 and all(size >= min(4, 16 - sum(asked[:i])) for i, size in enumerate(asked) if i), asked


def test_an_attempt_stopped_by_the_runners_shutdown_is_stored_with_its_cause(tmp_path: Path) -> None:
    """Issue 72's fifth defect: a runner stopped while its agent ran reported the attempt failed with no cause;
    it is an infrastructure failure (`infrastructure:runner_stopped`, the runtime page's table), retried, never
    trained."""
    started = threading.Event()

    @lightning_otel.rollout
    async def agent(task: dict[str, Any]) -> float:
        started.set()
        await asyncio.sleep(60)
        return 1.0

    with (
        EmbeddedCollector.on_sqlite_file(tmp_path / "collector.sqlite3") as addresses,
        Client(addresses.query) as client,
    ):
        (queued,) = client.enqueue([{"input": {"n": 0}, "max_attempts": 2}])
        runner = Runner(agent, addresses.query, RunnerOptions(max_rollouts=1))

        async def run_then_stop() -> None:
            task = asyncio.create_task(runner.run())
            assert await asyncio.to_thread(started.wait, 20)
            runner.stop()
            await asyncio.wait_for(task, 30)

        asyncio.run(run_then_stop())
        record = client.rollout(queued["rollout_id"])
    (attempt,) = record["attempt_list"]
    assert (attempt["status"], attempt["cause"]) == ("failed", "infrastructure:runner_stopped"), attempt
    assert record["status"] == "queuing"  # retried on a fresh attempt
