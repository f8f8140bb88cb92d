"""Finding traces (by the store's indexed fields, then by span tags) and operations for both Jaeger APIs."""

from __future__ import annotations

import asyncio

from lightning_otel.collector.query_params import KIND_NAMES
from lightning_otel.collector.reads.jaeger_json import span_matches_tags
from lightning_otel.collector.stores.store import SpanStore, StoredSpan, TraceQuery


async def find_traces(store: SpanStore, query: TraceQuery) -> list[list[StoredSpan]]:
    """The spans of each trace that matches `query`, at most `query.limit` traces."""
    if not query.tags:
        trace_ids = await store.find_trace_ids(query)
    else:
        trace_ids, seen = [], set()
        for stored in await store.candidate_spans(query, limit=max(query.limit * 50, 1000)):
            if stored.trace_id not in seen and span_matches_tags(stored, query.tags):
                seen.add(stored.trace_id)
                trace_ids.append(stored.trace_id)
                if len(trace_ids) >= query.limit:
                    break
    traces = await asyncio.gather(*(store.trace_spans(trace_id) for trace_id in trace_ids))
    return [spans for spans in traces if spans]


async def find_operations(store: SpanStore, service: str | None, kind: str | None) -> list[dict[str, str]]:
    """`{"name", "spanKind"}` of each operation (of `service`, of `kind`), as both Jaeger APIs list them."""
    found = [{"name": name, "spanKind": KIND_NAMES.get(k, "")} for name, k in await store.operations(service)]
    return [operation for operation in found if kind in (None, operation["spanKind"])]
