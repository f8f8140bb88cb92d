"""Runs on one queue, on every backend: each run's rollouts and resources are its own, a runner's claim takes one
run's work, a lapsed lease ends its run with its rollouts, starting a run touches no live one, and an outage of the
collector loses no run."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from lightning_otel.collector.queue.rollout_state import RolloutSpec, RolloutState
from lightning_otel.collector.queue.run_transactions import RunNotFound, RunRefused


def specs(run_id: str | None, count: int) -> list[RolloutSpec]:
    return [RolloutSpec(input={"n": index}, task_id=f"{run_id}-t{index}", run_id=run_id) for index in range(count)]


@pytest.fixture
async def state(span_store) -> RolloutState:
    return RolloutState(span_store, heartbeat_timeout_s=30.0)


async def test_a_claim_takes_one_runs_work_and_a_runner_serving_a_run_only_its(state: RolloutState) -> None:
    for run_id in ("run-a", "run-b"):
        await state.start_run(run_id, 60.0)
    await state.enqueue(specs("run-a", 2))
    await state.enqueue(specs("run-b", 3))
    await state.enqueue(specs(None, 1))
    served_b = await state.claim("runner-b", 10, wait_s=0, run_id="run-b")
    assert [a["task_id"] for a in served_b] == ["run-b-t0", "run-b-t1", "run-b-t2"]
    # chosen by the queue: the oldest waiting rollout's run, and that run's rollouts only
    chosen = await state.claim("runner-x", 10, wait_s=0)
    assert {a["run_id"] for a in chosen} == {"run-a"} and len(chosen) == 2
    assert await state.claim("runner-b", 10, wait_s=0, run_id="run-b") == []  # nothing of run-b left
    (outside,) = await state.claim("runner-y", 10, wait_s=0)  # what is left: queued outside any run
    assert outside["run_id"] is None


async def test_each_runs_resources_are_its_own(state: RolloutState) -> None:
    await state.put_resources({"main_llm": "outside"})
    for run_id in ("run-a", "run-b"):
        await state.start_run(run_id, 60.0)
    await state.put_resources({"main_llm": "a"}, "run-a")
    assert (await state.resources(None, "run-a"))["resources"] == {"main_llm": "a"}
    # a run that published none reads those published outside any run, never another run's
    assert (await state.resources(None, "run-b"))["resources"] == {"main_llm": "outside"}
    assert (await state.resources(None))["resources"] == {"main_llm": "a"}  # the newest, for a person looking
    await state.enqueue(specs("run-b", 1))
    await state.put_resources({"main_llm": "b"}, "run-b")
    await state.put_resources({"main_llm": "a2"}, "run-a")  # later, but run-a's
    (attempt,) = await state.claim("r", 1, wait_s=0, run_id="run-b")
    assert (await state.resources(attempt["resources_version"]))["resources"] == {"main_llm": "b"}


async def test_a_lapsed_lease_ends_its_run_with_its_rollouts_and_nothing_else(state: RolloutState) -> None:
    state._healthy_since_ns -= 10**10  # the collector has served for a while
    await state.start_run("run-dies", 1.0)
    await state.start_run("run-lives", 60.0)
    await state.enqueue(specs("run-dies", 3))
    await state.enqueue(specs("run-lives", 2))
    (running,) = await state.claim("r", 1, wait_s=0, run_id="run-dies")
    time.sleep(1.2)
    await state.renew_run("run-lives")
    await state.check_expired()
    assert (await state.run("run-dies"))["state"] == "lost"
    assert (await state.run("run-lives"))["state"] == "running"
    # the running attempt's runner is told to stop at its next heartbeat
    (stop,) = await state.heartbeat([(running["rollout_id"], running["attempt_id"])])
    assert stop["status"] == "cancelled"
    counts = await state.counts()
    assert (counts["cancelled"], counts["queuing"]) == (3, 2)
    record = await state.rollout(running["rollout_id"])
    assert "lease lapsed" in record["error"]
    with pytest.raises(RunRefused, match="run 'run-dies' is lost"):
        await state.enqueue(specs("run-dies", 1))


async def test_an_outage_loses_no_run(state: RolloutState) -> None:
    await state.start_run("run-a", 1.0)
    time.sleep(1.2)  # the trainer could not renew: the collector (this state) just came back
    state._healthy_since_ns = time.time_ns()
    await state.check_expired()
    assert (await state.run("run-a"))["state"] == "running"
    await state.renew_run("run-a")  # the trainer renews on its next tick
    state._healthy_since_ns -= 10**10
    await state.check_expired()
    assert (await state.run("run-a"))["state"] == "running"


async def test_a_paused_collector_loses_no_run_and_times_out_no_attempt(span_store) -> None:
    """A VM paused with its embedded collector and trainer inside: on waking, the watchdog sees it did not run for
    longer than its stall bound and counts leases and silences from then, as after an outage; the trainer then renews.
    The same silence without the pause (the trainer alone stopped) loses the run."""
    paused = RolloutState(span_store, heartbeat_timeout_s=1.0, stall_s=0.5)
    paused._healthy_since_ns -= 10**10  # the collector has served for a while
    await paused.start_run("run-a", 1.0)
    await paused.enqueue(specs("run-a", 1))
    (running,) = await paused.claim("r", 1, wait_s=0, run_id="run-a")
    paused.start()
    try:
        await asyncio.sleep(0.1)
        time.sleep(1.5)  # the whole process stops: no watchdog tick, no renewal, no heartbeat
        await asyncio.sleep(0.5)  # woken: the watchdog ticks before the trainer's renewal comes
        assert (await paused.run("run-a"))["state"] == "running"
        assert (await paused.rollout(running["rollout_id"]))["status"] == "running"
        await paused.renew_run("run-a")
        await paused.heartbeat([(running["rollout_id"], running["attempt_id"])])
    finally:
        await paused.stop()

    silent = RolloutState(span_store, heartbeat_timeout_s=1.0, stall_s=0.5)
    silent._healthy_since_ns -= 10**10
    await silent.start_run("run-b", 1.0)
    silent.start()
    try:
        await asyncio.sleep(1.6)  # the collector runs; only the trainer is gone
        assert (await silent.run("run-b"))["state"] == "lost"
    finally:
        await silent.stop()


async def test_starting_a_run_cancels_only_the_rollouts_of_runs_no_longer_running(state: RolloutState) -> None:
    state._healthy_since_ns -= 10**10
    await state.start_run("training", 60.0)
    await state.start_run("dead", 1.0)
    await state.start_run("ended", 60.0)
    await state.enqueue(specs("training", 2))
    await state.enqueue(specs("dead", 2))
    await state.enqueue(specs("ended", 1))
    await state.enqueue(specs(None, 1))
    await state.store.state_transaction(  # ended without cancelling its rollouts (an earlier collector's doing)
        lambda tx: tx.execute("UPDATE agl_runs SET state = 'finished' WHERE run_id = 'ended'")
    )
    time.sleep(1.2)
    await state.renew_run("training")
    run, cancelled = await state.start_run("dry-run", 60.0)
    assert run["state"] == "running" and cancelled == 3
    counts = await state.counts()
    assert (counts["queuing"], counts["cancelled"]) == (3, 3)  # the training's two and the one outside any run


async def test_a_run_started_again_owns_only_what_it_enqueues_from_then(state: RolloutState) -> None:
    """A trainer restarted from its checkpoint starts its run again (same id): what its killed predecessor left
    queued or running is cancelled, so no runner spends time on rollouts no trainer will read."""
    await state.start_run("run-a", 60.0)
    await state.enqueue(specs("run-a", 3))
    (running,) = await state.claim("runner", 1, wait_s=0, run_id="run-a")
    await state.start_run("run-b", 60.0)
    await state.enqueue(specs("run-b", 1))
    run, cancelled = await state.start_run("run-a", 60.0)  # the restarted trainer
    assert run["state"] == "running" and cancelled == 3
    after = await state.rollout(running["rollout_id"])
    assert after["status"] == "cancelled" and "started again" in after["error"]
    await state.enqueue(specs("run-a", 1))
    claimed = await state.claim("runner", 10, wait_s=0, run_id="run-a")
    assert len(claimed) == 1  # only the new trainer's
    assert (await state.counts())["queuing"] == 1  # run-b's, untouched


async def test_a_run_ends_by_its_own_word(state: RolloutState) -> None:
    await state.start_run("run-a", 60.0)
    await state.enqueue(specs("run-a", 2))
    run, cancelled = await state.end_run("run-a", "finished")
    assert (run["state"], cancelled) == ("finished", 2)
    assert (await state.renew_run("run-a"))["state"] == "finished"  # renewing does not revive it
    with pytest.raises(RunRefused, match="a run ends"):
        await state.end_run("run-a", "lost")
    with pytest.raises(RunNotFound):
        await state.end_run("never", "finished")
    with pytest.raises(RunRefused, match="unknown to this collector"):
        await state.enqueue(specs("never", 1))
    with pytest.raises(RunRefused, match="lease_s"):
        await state.start_run("run-b", 0.01)


def test_the_runs_routes_refuse_bad_input_and_keep_serving(start_collector) -> None:
    addresses = start_collector(grpc_port=None).addresses
    with httpx.Client(base_url=addresses.query, timeout=10) as http:
        bad = http.post("/v1/runs", json={"run_id": "r", "lease_s": 0})
        assert bad.status_code == 400 and "lease_s" in bad.text
        assert http.post("/v1/runs", json={"run_id": ""}).status_code == 400
        assert http.post("/v1/runs/nope/renew").status_code == 404
        assert http.get("/v1/runs/nope").status_code == 404
        assert http.get("/v1/runs", params={"state": "sleeping"}).status_code == 400
        started = http.post("/v1/runs", json={"run_id": "r"}).json()
        assert started["run"]["state"] == "running" and started["cancelled"] == 0
        assert http.post("/v1/runs/r/end", json={"state": "lost"}).status_code == 400
        assert [run["run_id"] for run in http.get("/v1/runs", params={"state": "running"}).json()["runs"]] == ["r"]
        claim = http.post("/v1/queue/claim", json={"runner_id": "x", "run_id": "r"}).json()
        assert claim["run"] == {"run_id": "r", "state": "running"} and claim["live_runs"] == 1
        assert http.post("/v1/runs/r/end", json={"state": "finished"}).json()["run"]["state"] == "finished"


async def test_runs_publishing_at_once_each_get_a_version_of_their_own(state: RolloutState) -> None:
    import asyncio

    for run_id in ("run-a", "run-b"):
        await state.start_run(run_id, 60.0)
    versions = await asyncio.gather(
        *(state.put_resources({"main_llm": str(index)}, ("run-a", "run-b")[index % 2]) for index in range(24))
    )
    assert sorted(versions) == list(range(1, 25))  # none refused as a duplicate version (PostgreSQL: one at a time)
