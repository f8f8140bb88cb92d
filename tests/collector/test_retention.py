"""`--retention`: spans that ended longer ago than the retention are deleted (at start, then periodically)."""

from __future__ import annotations

import time

import httpx

from lightning_otel.testing.otlp_factory import make_span
from tests.collector.helpers import send, stored_ids, wait_for


def test_retention_deletes_spans_that_ended_long_ago(start_collector, tmp_path) -> None:
    store_url = f"sqlite:///{tmp_path}/retention.sqlite3"
    first = start_collector(store_url=store_url)
    now_ns = time.time_ns()
    old = [make_span(1, s + 1) for s in range(20)]  # ended in September 2026
    recent = make_span(2, 1)
    recent.start_time_unix_nano, recent.end_time_unix_nano = now_ns - 1000, now_ns
    send(first, [*old, recent])
    first.stop()
    kept = start_collector(store_url=store_url, retention_s=3600)  # checked at start
    wait_for(lambda: len(stored_ids(kept)) == 1)
    metrics = httpx.get(kept.addresses.query + "/metrics").text
    assert "agl_collector_spans_deleted_total 20.0" in metrics
