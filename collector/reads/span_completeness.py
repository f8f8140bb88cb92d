"""When is a rollout's trace complete? When no span in it names a parent the store has not received.

Spans of one rollout come from several processes: the runner (flushed before it reports the attempt), the trainer's
policy gateway (flushed before the trainer reads), and an agent service that exports on its own schedule (the OTel
SDK batches for 5 s by default). A service's spans are the parents of what it caused elsewhere: its LLM client span
is the parent of the gateway's span for that call (the `traceparent` it sent), its agent span the parent of its LLM
spans. So a rollout whose spans all have their parents is complete, and one with a span whose parent is missing is
waiting for another process's export. The parent may lie outside the rollout's own spans (a span recorded without
the rollout's baggage): it counts when the store has it in the same trace.

`read_complete` re-reads only the incomplete rollouts, each time a commit stores new spans, until all are complete
or the bound passes: event-driven, never a fixed sleep. What is still incomplete then is reported to the reader.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from lightning_otel.collector.receiving.ingest import Ingestor
from lightning_otel.collector.stores.store import SpanStore, StoredSpan

Wanted = tuple[str, str | None]  # (rollout_id, attempt_id or "latest" or None)


def missing_parents(spans: Sequence[StoredSpan]) -> set[tuple[bytes, bytes]]:
    """(trace id, parent span id) of every parent named by `spans` and not among them."""
    present = {(span.trace_id, span.span_id) for span in spans}
    return {
        (span.trace_id, span.parent_span_id)
        for span in spans
        if span.parent_span_id and (span.trace_id, span.parent_span_id) not in present
    }


async def _still_missing(store: SpanStore, missing: set[tuple[bytes, bytes]]) -> set[tuple[bytes, bytes]]:
    """Those of `missing` the store does not have in their trace (spans outside the rollout count)."""
    if not missing:
        return missing
    traces = sorted({trace_id for trace_id, _ in missing})
    stored = await asyncio.gather(*(store.trace_spans(trace_id) for trace_id in traces))
    have = {(span.trace_id, span.span_id) for spans in stored for span in spans}
    return missing - have


async def read_complete(
    store: SpanStore, ingestor: Ingestor, wanted: Sequence[Wanted], wait_s: float
) -> tuple[list[list[StoredSpan]], dict[int, int]]:
    """Spans of each wanted rollout attempt, waiting up to `wait_s` for missing parents to arrive.

    Returns the spans (in `wanted`'s order) and, for the indexes still incomplete at the bound, how many parents
    they miss."""
    deadline = time.monotonic() + wait_s
    generation = ingestor.commit_generation
    found = await store.attempts_spans(wanted)
    incomplete: dict[int, int] = {}
    pending = range(len(wanted))
    while True:
        for index in pending:
            missing = await _still_missing(store, missing_parents(found[index]))
            if missing:
                incomplete[index] = len(missing)
            else:
                incomplete.pop(index, None)
        remaining = deadline - time.monotonic()
        if not incomplete or remaining <= 0:
            return found, incomplete
        if not await ingestor.wait_for_commit(remaining, after=generation):
            return found, incomplete
        generation = ingestor.commit_generation
        pending = list(incomplete)
        reread = await store.attempts_spans([wanted[index] for index in pending])
        for index, spans in zip(pending, reread, strict=True):
            found[index] = spans
