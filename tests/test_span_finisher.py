"""LLM spans end on a background thread; `flush()` guarantees they are ended and exported when it returns."""

from __future__ import annotations

import os
import time

import openai
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import lightning_otel
from lightning_otel.capture.setup import add_span_processor
from lightning_otel.capture.span_finisher import SpanFinisher


def test_flush_returns_after_every_llm_span_is_exported_with_its_real_end_time(openai_test_server, agl_spans):
    exporter = InMemorySpanExporter()
    add_span_processor(SimpleSpanProcessor(exporter))
    client = openai.OpenAI(base_url=openai_test_server.base_url, api_key="t", max_retries=0)
    with lightning_otel.rollout_context("ro-f"):
        for _ in range(20):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        returned_at = time.time_ns()
    assert lightning_otel.flush() is True
    llm = [s for s in exporter.get_finished_spans() if s.name == "chat m"]
    assert len(llm) == 20
    assert all(s.end_time <= returned_at for s in llm)  # the end time is the call's, not the background thread's
    assert all(s.attributes["agl.llm.response_token_ids"] for s in llm)


def test_finisher_runs_jobs_in_order_and_survives_a_failing_job():
    finisher = SpanFinisher()
    done: list[int] = []

    def fail() -> None:
        raise RuntimeError("boom")

    finisher.submit(lambda: done.append(1))
    finisher.submit(fail)
    finisher.submit(lambda: done.append(2))
    assert finisher.drain(5.0) is True
    assert done == [1, 2]


def test_a_forked_child_starts_its_own_worker():
    finisher = SpanFinisher()
    finisher.submit(lambda: None)
    assert finisher.drain(5.0) is True
    pid = os.fork()
    if pid == 0:  # the child: the parent's worker thread does not exist here
        done: list[int] = []
        finisher.submit(lambda: done.append(1))
        os._exit(0 if finisher.drain(5.0) and done == [1] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_worker_gathers_jobs_and_a_drain_runs_them_at_once(monkeypatch):
    """Woken by a job, the worker waits for more instead of trading the GIL with the caller for each one; a drain
    (what `flush()` does) does not wait that out."""
    from lightning_otel.capture import span_finisher

    monkeypatch.setattr(span_finisher, "GATHER_S", 5.0)
    finisher = SpanFinisher()
    done: list[int] = []
    for index in range(5):
        finisher.submit(lambda index=index: done.append(index))
    time.sleep(0.3)
    assert done == []  # gathering: none ran yet
    started = time.monotonic()
    assert finisher.drain(10.0) is True
    assert done == [0, 1, 2, 3, 4]
    assert time.monotonic() - started < 2.5  # the drain ended the 5 s gathering
