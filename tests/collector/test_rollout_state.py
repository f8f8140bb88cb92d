"""Rollout state conformance: the queue, attempts, retries, timeouts, heartbeats and resources on every backend."""

from __future__ import annotations

import asyncio
import time

import pytest

from lightning_otel.collector.queue.rollout_state import InvalidRequest, NotFound, RolloutSpec, RolloutState
from lightning_otel.testing.otlp_factory import make_span, records


def specs(count: int, **options: object) -> list[RolloutSpec]:
    return [RolloutSpec(input={"n": index}, task_id=f"t{index}", **options) for index in range(count)]  # type: ignore[arg-type]


@pytest.fixture
async def state(span_store) -> RolloutState:
    return RolloutState(span_store, heartbeat_timeout_s=30.0)


async def test_enqueue_claim_complete_in_queue_order(state: RolloutState) -> None:
    queued = await state.enqueue(specs(3, group_id="g"))
    assert [r["status"] for r in queued] == ["queuing"] * 3
    assert [r["input"] for r in queued] == [{"n": 0}, {"n": 1}, {"n": 2}]
    first = await state.claim("runner-a", 2, wait_s=0)
    assert [a["task_id"] for a in first] == ["t0", "t1"]  # first in, first claimed
    assert {(a["attempt_id"], a["attempt_number"], a["status"], a["group_id"]) for a in first} == {
        ("at-1", 1, "running", "g")
    }
    accepted, status = await state.complete(first[0]["rollout_id"], "at-1", "succeeded", reward=0.5)
    assert (accepted, status) == (True, "succeeded")
    record = await state.rollout(first[0]["rollout_id"])
    assert (record["status"], record["reward"], record["attempt_id"]) == ("succeeded", 0.5, "at-1")
    assert [(a["attempt_id"], a["status"], a["runner_id"]) for a in record["attempt_list"]] == [
        ("at-1", "succeeded", "runner-a")
    ]
    assert await state.counts() == {
        "queuing": 1,
        "running": 1,
        "succeeded": 1,
        "failed": 0,
        "timeout": 0,
        "cancelled": 0,
    }


async def test_failed_attempts_retry_until_max_attempts(state: RolloutState) -> None:
    (queued,) = await state.enqueue(specs(1, max_attempts=2))
    rollout_id = queued["rollout_id"]
    await state.claim("a", 5, wait_s=0)
    assert await state.complete(rollout_id, "at-1", "failed", error="boom") == (True, "queuing")
    (second,) = await state.claim("b", 5, wait_s=0)
    assert (second["rollout_id"], second["attempt_id"], second["attempt_number"]) == (rollout_id, "at-2", 2)
    assert await state.complete(rollout_id, "at-2", "failed", error="boom again") == (True, "failed")
    record = await state.rollout(rollout_id)
    assert (record["status"], record["attempts"], record["error"]) == ("failed", 2, "boom again")
    assert await state.claim("c", 5, wait_s=0) == []


async def test_only_the_first_report_of_an_attempt_counts(state: RolloutState) -> None:
    (queued,) = await state.enqueue(specs(1))
    await state.claim("a", 1, wait_s=0)
    assert await state.complete(queued["rollout_id"], "at-1", "succeeded", reward=1.0) == (True, "succeeded")
    assert await state.complete(queued["rollout_id"], "at-1", "failed") == (False, "succeeded")
    assert (await state.rollout(queued["rollout_id"]))["reward"] == 1.0
    with pytest.raises(NotFound):
        await state.complete("no-such-rollout", "at-1", "succeeded")
    with pytest.raises(InvalidRequest):
        await state.complete(queued["rollout_id"], "at-1", "timeout")  # runners report succeeded or failed


async def test_silent_attempts_time_out_and_retry_while_spans_keep_others_alive(span_store) -> None:
    state = RolloutState(span_store, heartbeat_timeout_s=0.3)
    quiet, talking = await state.enqueue(specs(2, max_attempts=2))
    await state.claim("a", 2, wait_s=0)
    for step in range(1, 6):  # spans of one attempt arrive; the other attempt says nothing
        state.spans_committed(records([make_span(1, step, rollout=talking["rollout_id"], attempt="at-1")]))
        await asyncio.sleep(0.1)
        await state.check_expired()
    assert (await state.rollout(talking["rollout_id"]))["status"] == "running"
    record = await state.rollout(quiet["rollout_id"])
    assert record["status"] == "queuing"  # retried
    assert record["attempt_list"][0]["status"] == "timeout"
    assert record["attempt_list"][0]["error"] == "no heartbeat from the runner"
    (retry,) = await state.claim("b", 5, wait_s=0)
    assert (retry["rollout_id"], retry["attempt_id"]) == (quiet["rollout_id"], "at-2")
    # the late result of the timed-out attempt is not accepted; the retry's is
    assert await state.complete(quiet["rollout_id"], "at-1", "succeeded") == (False, "running")
    assert await state.complete(quiet["rollout_id"], "at-2", "succeeded") == (True, "succeeded")


async def test_explicit_heartbeats_and_stop_list(span_store) -> None:
    state = RolloutState(span_store, heartbeat_timeout_s=0.3)
    kept, cancelled = await state.enqueue(specs(2))
    await state.claim("a", 2, wait_s=0)
    pairs = [(kept["rollout_id"], "at-1"), (cancelled["rollout_id"], "at-1")]
    assert await state.cancel([cancelled["rollout_id"]]) == 1
    for _ in range(5):
        stop = await state.heartbeat(pairs)
        await asyncio.sleep(0.1)
        await state.check_expired()
    assert stop == [{"rollout_id": cancelled["rollout_id"], "attempt_id": "at-1", "status": "cancelled"}]
    assert (await state.rollout(kept["rollout_id"]))["status"] == "running"


async def test_rollout_timeout_ends_an_attempt_that_keeps_beating(span_store) -> None:
    state = RolloutState(span_store, heartbeat_timeout_s=30)
    (queued,) = await state.enqueue(specs(1, timeout_s=0.2, max_attempts=1))
    await state.claim("a", 1, wait_s=0)
    await state.heartbeat([(queued["rollout_id"], "at-1")])
    await asyncio.sleep(0.3)
    changed = await state.check_expired()
    assert changed == [(queued["rollout_id"], "at-1", "timeout")]
    record = await state.rollout(queued["rollout_id"])
    assert (record["status"], record["error"]) == ("timeout", "rollout ran past its timeout_s")


async def test_a_lost_runner_fails_its_attempts_at_once(state: RolloutState) -> None:
    queued = await state.enqueue(specs(3, max_attempts=2))
    await state.claim("doomed", 2, wait_s=0)
    await state.claim("healthy", 1, wait_s=0)
    assert await state.fail_runner("doomed", "runner process exited with code -9") == 2
    records = await state.rollouts([r["rollout_id"] for r in queued])
    assert [r["status"] for r in records] == ["queuing", "queuing", "running"]


async def test_concurrent_claims_never_hand_out_a_rollout_twice(state: RolloutState) -> None:
    queued = await state.enqueue(specs(200))
    claims = await asyncio.gather(*(state.claim(f"r{i}", 7, wait_s=0.2) for i in range(40)))
    claimed = [a["rollout_id"] for batch in claims for a in batch]
    assert len(claimed) == len(set(claimed)) == 200
    assert set(claimed) == {r["rollout_id"] for r in queued}


async def test_claim_long_poll_wakes_on_enqueue(state: RolloutState) -> None:
    started = time.monotonic()
    claiming = asyncio.create_task(state.claim("a", 1, wait_s=10))
    await asyncio.sleep(0.1)
    await state.enqueue(specs(1))
    claimed = await asyncio.wait_for(claiming, 5)
    assert len(claimed) == 1
    assert time.monotonic() - started < 1.0  # woken by the enqueue, not by a poll interval


async def test_wait_returns_when_all_are_final(state: RolloutState) -> None:
    queued = await state.enqueue(specs(3))
    ids = [r["rollout_id"] for r in queued]
    done, records, unfinished = await state.wait(ids, timeout_s=0.1)
    assert not done and [r["status"] for r in records] == ["queuing"] * 3
    assert unfinished == {"queuing": 3, "running": 0}
    waiting = asyncio.create_task(state.wait(ids, timeout_s=10))
    for attempt in await state.claim("a", 3, wait_s=0):
        await asyncio.sleep(0.05)
        await state.complete(attempt["rollout_id"], attempt["attempt_id"], "succeeded")
    done, records, unfinished = await asyncio.wait_for(waiting, 5)
    assert done and [r["status"] for r in records] == ["succeeded"] * 3
    assert unfinished == {"queuing": 0, "running": 0}


async def test_a_poller_gets_counts_and_only_the_records_it_asks_for(state: RolloutState) -> None:
    """A trainer polling a large batch asks for counts only ("none") or for the final records only ("final"): an
    unfinished batch is not read whole at every poll."""
    queued = await state.enqueue(specs(4, max_attempts=1))
    ids = [r["rollout_id"] for r in queued]
    first, second, _ = await state.claim("a", 3, wait_s=0)
    await state.complete(first["rollout_id"], first["attempt_id"], "succeeded")
    await state.complete(second["rollout_id"], second["attempt_id"], "failed")
    done, records, unfinished = await state.wait(ids, timeout_s=0, records="none")
    assert (done, records, unfinished) == (False, [], {"queuing": 1, "running": 1})
    done, records, unfinished = await state.wait(ids, timeout_s=0, records="final")
    assert [(r["rollout_id"], r["status"]) for r in records] == [
        (first["rollout_id"], "succeeded"),
        (second["rollout_id"], "failed"),
    ]
    assert not done and unfinished == {"queuing": 1, "running": 1}
    with pytest.raises(ValueError, match="records must be one of"):
        await state.wait(ids, timeout_s=0, records="some")


async def test_wait_reads_only_what_is_left_and_follows_a_retried_rollout_until_it_is_final(
    state: RolloutState,
) -> None:
    queued = await state.enqueue(specs(2, max_attempts=2))
    ids = [r["rollout_id"] for r in queued]
    waiting = asyncio.create_task(state.wait(ids, timeout_s=10))
    first, second = await state.claim("a", 2, wait_s=0)
    await state.complete(first["rollout_id"], first["attempt_id"], "succeeded")
    assert await state.complete(second["rollout_id"], second["attempt_id"], "failed") == (True, "queuing")
    await asyncio.sleep(0.2)  # several checks: the first rollout is final and no longer read; the second is queued
    assert not waiting.done()
    (again,) = await state.claim("b", 1, wait_s=0)
    await state.complete(again["rollout_id"], again["attempt_id"], "succeeded")
    done, records, _ = await asyncio.wait_for(waiting, 5)
    assert done and [(r["rollout_id"], r["status"]) for r in records] == [(i, "succeeded") for i in ids]


async def test_resources_are_versioned_and_attempts_record_theirs(state: RolloutState) -> None:
    with pytest.raises(NotFound):
        await state.resources(None)
    assert await state.put_resources({"main_llm": {"endpoint": "http://a/v1"}}) == 1
    await state.enqueue(specs(1))
    (claimed,) = await state.claim("a", 1, wait_s=0)
    assert claimed["resources_version"] == 1
    assert await state.put_resources({"main_llm": {"endpoint": "http://b/v1"}}) == 2
    await state.enqueue([RolloutSpec(input=1), RolloutSpec(input=2, resources_version=1)])
    later = await state.claim("a", 2, wait_s=0)
    assert [a["resources_version"] for a in later] == [2, 1]  # the latest, unless the rollout pinned one
    assert (await state.resources(None))["resources"] == {"main_llm": {"endpoint": "http://b/v1"}}
    assert (await state.resources(1))["resources"] == {"main_llm": {"endpoint": "http://a/v1"}}


async def test_bad_specs_are_refused_whole(state: RolloutState) -> None:
    for bad in ({"task_id": "x"}, {"input": 1, "mode": "prod"}, {"input": 1, "max_attempts": 0}, {"input": 1, "x": 2}):
        with pytest.raises(InvalidRequest):
            RolloutSpec.from_json(bad)
    await state.enqueue([RolloutSpec(input=1, rollout_id="fixed")])
    with pytest.raises(InvalidRequest, match="already exist"):
        await state.enqueue([RolloutSpec(input=2), RolloutSpec(input=3, rollout_id="fixed")])
    assert await state.counts() == {
        "queuing": 1,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "timeout": 0,
        "cancelled": 0,
    }


async def test_a_lost_runners_parked_claim_cannot_take_the_rollouts_its_death_requeued(state: RolloutState) -> None:
    (queued,) = await state.enqueue(specs(1, max_attempts=3))
    await state.claim("doomed", 1, wait_s=0)
    parked = asyncio.create_task(state.claim("doomed", 1, wait_s=5))  # its long-poll outlives the process
    await asyncio.sleep(0.05)
    await state.fail_runner("doomed", "killed")
    assert await asyncio.wait_for(parked, 2) == []
    (retry,) = await state.claim("healthy", 1, wait_s=0)
    assert (retry["rollout_id"], retry["attempt_id"]) == (queued["rollout_id"], "at-2")


async def test_paging_reads_every_rollout_once_by_position_or_by_group(state: RolloutState) -> None:
    """The export's keyset paging: page by page, each rollout exactly once, in order; by group, a group's rollouts
    together even when the groups were queued interleaved (group names with ':' in them too)."""
    queued = []
    for round_ in range(3):  # groups a:x, b and c each get one rollout per round: interleaved positions
        for group in ("c", "a:x", "b"):
            queued += await state.enqueue([RolloutSpec(input={"r": round_}, task_id=group, group_id=group)])
    ids = [record["rollout_id"] for record in queued]
    by_group_then_position = sorted(range(len(ids)), key=lambda n: (queued[n]["group_id"], n))
    for order, expected in (("position", ids), ("group", [ids[n] for n in by_group_then_position])):
        seen, cursor = [], None
        while True:
            page, cursor = await state.page(None, order, cursor, 2)
            seen += [record["rollout_id"] for record in page]
            if cursor is None:
                break
        assert seen == expected, order
    by_group, _ = await state.page(None, "group", None, 100)
    assert [r["group_id"] for r in by_group] == ["a:x"] * 3 + ["b"] * 3 + ["c"] * 3
    assert (await state.page("succeeded", "position", None, 10)) == ([], None)
    for bad in (("position", "x"), ("sideways", None)):
        with pytest.raises(InvalidRequest):
            await state.page(None, bad[0], bad[1], 10)


async def test_a_wait_spaces_its_checks_by_what_they_cost_while_completions_trickle_in(
    state: RolloutState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each check of a large batch costs the store's thread time that claims and completions queue behind: a wait
    checks at most about once per ten times a check's cost, and still returns soon after the last completion."""
    from lightning_otel.collector.queue import rollout_state

    checks: list[float] = []
    counted = rollout_state.unfinished

    def costly_unfinished(tx, ids):  # a check as slow as one over thousands of rollouts
        checks.append(time.monotonic())
        time.sleep(0.03)
        return counted(tx, ids)

    monkeypatch.setattr(rollout_state, "unfinished", costly_unfinished)
    queued = await state.enqueue(specs(20))
    ids = [r["rollout_id"] for r in queued]
    waiting = asyncio.create_task(state.wait(ids, timeout_s=30))
    attempts = await state.claim("a", 20, wait_s=0)
    for attempt in attempts:  # one completion every 25 ms for half a second
        await asyncio.sleep(0.025)
        await state.complete(attempt["rollout_id"], attempt["attempt_id"], "succeeded")
    last = time.monotonic()
    done, records, _ = await asyncio.wait_for(waiting, 5)
    assert done and {r["status"] for r in records} == {"succeeded"}
    # checked after each burst (every ~55 ms) before; now at most every ~0.3 s: the first, ~2 while they trickle
    # in, the one that finds them all final
    assert len(checks) <= 5, [round(t - checks[0], 2) for t in checks]
    assert time.monotonic() - last < 1.5


async def test_a_wait_follows_this_collectors_endings_without_reading_the_store_again(
    state: RolloutState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The endings this collector announces take rollouts off a wait's list: the store is read once, not after every
    completion burst (which cost a trainer waiting on a 2,000-rollout batch ~9% of a core)."""
    from lightning_otel.collector.queue import rollout_state

    reads: list[int] = []
    counted = rollout_state.unfinished

    def counting_unfinished(tx, ids):
        reads.append(len(ids))
        return counted(tx, ids)

    monkeypatch.setattr(rollout_state, "unfinished", counting_unfinished)
    queued = await state.enqueue(specs(20, max_attempts=2))
    ids = [r["rollout_id"] for r in queued]
    waiting = asyncio.create_task(state.wait(ids, timeout_s=30))
    attempts = await state.claim("a", 20, wait_s=0)
    retried = attempts[0]
    assert await state.complete(retried["rollout_id"], "at-1", "failed", error="boom") == (True, "queuing")
    for attempt in attempts[1:]:  # one completion every 25 ms
        await asyncio.sleep(0.025)
        await state.complete(attempt["rollout_id"], attempt["attempt_id"], "succeeded")
    await asyncio.sleep(0.05)
    assert not waiting.done()  # the retried rollout is queuing again, not final
    (again,) = await state.claim("b", 1, wait_s=0)
    await state.complete(again["rollout_id"], again["attempt_id"], "succeeded")
    done, records, unfinished = await asyncio.wait_for(waiting, 5)
    assert done and [r["status"] for r in records] == ["succeeded"] * 20
    assert unfinished == {"queuing": 0, "running": 0}
    # the first read; at most one more if the machine is so slow that the recheck timer (1 s) fires meanwhile
    assert reads[0] == 20 and len(reads) <= 2, reads


async def test_a_wait_reads_the_store_for_endings_it_cannot_name(span_store) -> None:
    """Another collector on the same database ended the rollouts: its signal (or, without one, the recheck timer)
    makes the wait read the store."""
    waiting_state = RolloutState(span_store, recheck_s=30.0)
    other = RolloutState(span_store)
    queued = await waiting_state.enqueue(specs(2))
    first, second = (r["rollout_id"] for r in queued)
    waiting = asyncio.create_task(waiting_state.wait([first, second], timeout_s=20))
    await asyncio.sleep(0.1)  # its first read: both unfinished
    attempts = {a["rollout_id"]: a for a in await other.claim("a", 2, wait_s=0)}
    await other.complete(first, attempts[first]["attempt_id"], "succeeded")
    await other.complete(second, attempts[second]["attempt_id"], "succeeded")
    await asyncio.sleep(0.2)
    assert not waiting.done()  # nothing told it: the other collector's endings name nothing here
    started = time.monotonic()
    waiting_state.ended_unseen()  # what the collector does on the database's change notice
    done, records, _ = await asyncio.wait_for(waiting, 5)
    assert done and [r["status"] for r in records] == ["succeeded"] * 2
    assert time.monotonic() - started < 1.0

    timed = RolloutState(span_store, recheck_s=0.2)  # no notice at all: the recheck timer
    (third,) = await timed.enqueue(specs(1))
    waiting = asyncio.create_task(timed.wait([third["rollout_id"]], timeout_s=20))
    await asyncio.sleep(0.05)
    (attempt,) = await other.claim("a", 1, wait_s=0)
    await other.complete(attempt["rollout_id"], attempt["attempt_id"], "succeeded")
    done, _, _ = await asyncio.wait_for(waiting, 5)
    assert done


async def test_a_poll_that_times_out_answers_with_the_stores_counts(state: RolloutState) -> None:
    """Claims announce no ending: a poll's queuing and running counts come from a read at its deadline."""
    queued = await state.enqueue(specs(4))
    ids = [r["rollout_id"] for r in queued]
    polling = asyncio.create_task(state.wait(ids, timeout_s=0.4, records="none"))
    await asyncio.sleep(0.05)
    first, _second, _third = await state.claim("a", 3, wait_s=0)
    await state.complete(first["rollout_id"], first["attempt_id"], "succeeded")
    done, records, unfinished = await asyncio.wait_for(polling, 5)
    assert (done, records, unfinished) == (False, [], {"queuing": 1, "running": 2})
