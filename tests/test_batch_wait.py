"""A training waits for its batch by counting it: polls carry counts, not the batch's records, which are read once
when the batch is final (a batch of thousands polled every second was read whole at every poll). `collect` reads
the rollouts that finished at each poll while the rest run, and leaves to the end those whose spans are not complete
yet (or every one, when a span source could not be flushed)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.collector import Client
from lightning_otel.collector.client import otlp_endpoint_for
from lightning_otel.runtime.training_run import TrainingRun
from lightning_otel.testing.otlp_factory import make_request, make_span


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


class ReadCountingClient(Client):
    """A real client that keeps which rollouts each spans read asked for, and with what wait."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.reads: list[tuple[list[str], float]] = []

    def complete_rollouts_spans(self, rollout_ids: list[str], **options: Any) -> Any:
        self.reads.append((list(rollout_ids), options.get("wait_s", 30.0)))
        return super().complete_rollouts_spans(rollout_ids, **options)


def rollout_spans(index: int, rollout_id: str, attempt_id: str) -> tuple[Span, Span]:
    """An agent span and its LLM call (token ids), as a runner would export them."""
    ids = {"rollout": rollout_id, "attempt": attempt_id, "agent": "write"}
    agent = make_span(index + 1, 1, name="invoke_agent write", operation="invoke_agent", **ids)
    call = make_span(index + 1, 2, parent=1, name="chat tiny", operation="chat", kind=3, **ids, attributes={
        "agl.llm.prompt_token_ids": [1, 2, 3], "agl.llm.response_token_ids": [4, 5],
        "agl.llm.token_ids_complete": True,
    })  # fmt: skip
    return agent, call


def run_with_spans(url: str, count: int, every_s: float, late: int, late_after_s: float) -> None:
    """A runner's part: export each attempt's spans, then report it. Rollout `late` has its agent span exported
    `late_after_s` after the last report (an agent service's late export): its call names a parent not yet stored."""
    with Client(url) as client:
        otlp = otlp_endpoint_for(url, client.collector_info()) + "/v1/traces"
        held: list[Span] = []
        done = 0
        while done < count:
            for attempt in client.claim("worker", max_attempts=1, wait_s=5)["attempts"]:
                agent, call = rollout_spans(done, attempt["rollout_id"], attempt["attempt_id"])
                spans = [call] if done == late else [agent, call]
                held += [agent] if done == late else []
                body = make_request(spans).SerializeToString()
                headers = {"content-type": "application/x-protobuf"}
                assert httpx.post(otlp, content=body, headers=headers).status_code == 200
                time.sleep(every_s)
                client.complete(attempt["rollout_id"], attempt["attempt_id"], "succeeded", reward=1.0)
                done += 1
        time.sleep(late_after_s)
        body = make_request(held).SerializeToString()
        assert httpx.post(otlp, content=body, headers={"content-type": "application/x-protobuf"}).status_code == 200


def test_collect_reads_rollouts_as_they_finish_and_leaves_incomplete_ones_to_the_end(collector: str) -> None:
    with ReadCountingClient(collector) as client:
        run = TrainingRun(client, TraceToTriplet())
        batch = run.submit([{"q": i} for i in range(6)])
        late = batch.rollout_ids[2]
        worker = threading.Thread(target=run_with_spans, args=(collector, 6, 0.35, 2, 1.5), daemon=True)
        worker.start()
        result = run.collect(batch)
        worker.join(10)
    early, (last_ids, last_wait) = client.reads[:-1], client.reads[-1]
    assert early and all(wait == 0 for _, wait in early), client.reads  # read while the batch ran, never waiting
    read_early = {rollout_id for ids, _ in early for rollout_id in ids} - {late}
    assert len(read_early) >= 3, client.reads
    # The end reads only what was not read complete before: the rollout whose parent came late, with the wait.
    assert late in last_ids and not read_early & set(last_ids) and last_wait == run.settings.span_wait_s, client.reads
    assert result.metrics()["succeeded"] == 6 and result.incomplete == {}
    assert list(result.spans) == batch.rollout_ids == list(result.adapted)  # the batch's order, whoever read them
    assert all(len(spans) == 2 for spans in result.spans.values()), result.spans
    assert [len(adapted.triplets) for adapted in result.adapted.values()] == [1] * 6


def test_a_span_source_that_did_not_flush_keeps_every_rollout_for_the_end(collector: str) -> None:
    with ReadCountingClient(collector) as client:
        run = TrainingRun(client, TraceToTriplet())
        run.add_span_source(lambda: False)  # a gateway whose spans could not be flushed
        batch = run.submit([{"q": i} for i in range(3)])
        worker = threading.Thread(target=run_with_spans, args=(collector, 3, 0.35, -1, 0.0), daemon=True)
        worker.start()
        result = run.collect(batch)
        worker.join(10)
    assert [ids for ids, _ in client.reads] == [batch.rollout_ids], client.reads
    assert result.metrics()["triplets"] == 3
