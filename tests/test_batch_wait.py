"""A training waits for its batch by counting it: polls carry counts, not the batch's records, which are read once
when the batch is final (a batch of thousands polled every second was read whole at every poll)."""

from __future__ import annotations

import threading
import time
from typing import Any

from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.collector import Client
from lightning_otel.runtime.algorithm import TrainingRun


class CountingClient(Client):
    """A real client that keeps what each wait asked for and how many records came back."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.waits: list[tuple[str, int, bool]] = []

    def wait_rollouts(self, rollout_ids: list[str], *, timeout: float = 30.0, records: str = "all") -> Any:
        answer = super().wait_rollouts(rollout_ids, timeout=timeout, records=records)
        self.waits.append((records, len(answer["rollouts"]), answer["done"]))
        return answer


def complete_slowly(url: str, count: int, every_s: float) -> None:
    with Client(url) as client:
        done = 0
        while done < count:
            for attempt in client.claim("worker", max_attempts=1, wait_s=5)["attempts"]:
                time.sleep(every_s)
                client.complete(attempt["rollout_id"], attempt["attempt_id"], "succeeded", reward=1.0)
                done += 1


def test_a_batch_is_polled_by_counts_and_its_records_read_once(collector: str) -> None:
    progress: list[tuple[int, int]] = []
    with CountingClient(collector) as client:
        run = TrainingRun(client, TraceToTriplet(), on_progress=lambda _, final, total: progress.append((final, total)))
        batch = run.submit([{"q": i} for i in range(6)])
        worker = threading.Thread(target=complete_slowly, args=(collector, 6, 0.35), daemon=True)
        worker.start()
        records = run.wait(batch)
        worker.join(10)
    assert [r["status"] for r in records] == ["succeeded"] * 6
    polls, last = client.waits[:-1], client.waits[-1]
    assert len(polls) >= 2, client.waits  # 2 s of completions under 1 s polls
    assert all(records == "none" and returned == 0 for records, returned, _ in polls), client.waits
    assert last == ("all", 6, True)
    assert progress[-1] == (6, 6) and progress[0][0] < 6
    assert [final for final, _ in progress] == sorted(final for final, _ in progress)
