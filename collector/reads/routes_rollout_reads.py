"""Rollout reads for the trainer: `GET /v1/rollouts`, `GET /v1/rollouts/{id}/spans` (`attempt_id`, `latest`,
`format=flat|otlp`, and `min_spans` + `timeout` to wait, event-driven, until that many spans are committed) and
`POST /v1/rollouts/spans` with `{"rollouts": [{"rollout_id": ...}, ...]}`: a training batch in one call; with
`"wait_complete_s": s` it waits (event-driven, at most s) until every rollout's spans have their parents (see
`span_completeness`) and names those still incomplete in `"incomplete": {rollout_id: missing parents}`. Flat spans
carry their log records among their `events` (`log_records`)."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lightning_otel.collector.query_params import (
    BadQuery,
    FastJSONResponse,
    int_param,
    param,
)
from lightning_otel.collector.reads.span_completeness import read_complete
from lightning_otel.collector.receiving.ingest import Ingestor
from lightning_otel.collector.receiving.log_records import attach_logs
from lightning_otel.collector.receiving.otlp_json import flat_span, traces_data_json
from lightning_otel.collector.stores.store import SpanStore


def rollout_read_routes(store: SpanStore, ingestor: Ingestor) -> list[Route]:
    async def rollouts(request: Request) -> Response:
        limit = int_param(request, "limit", default=100) or 100
        summaries = await store.rollouts(limit=limit, since_ns=int_param(request, "since_ns"))
        return JSONResponse(
            {
                "rollouts": [
                    {
                        "rollout_id": s.rollout_id,
                        "span_count": s.span_count,
                        "start_time_unix_nano": s.start_ns,
                        "end_time_unix_nano": s.end_ns,
                        "agents": s.agents,
                        "attempts": s.attempts,
                    }
                    for s in summaries
                ]
            }
        )

    async def rollout_spans(request: Request) -> Response:
        rollout_id = request.path_params["rollout_id"]
        attempt_id = param(request, "attempt_id")
        if request.query_params.get("latest") in ("1", "true"):
            attempt_id = "latest"
        min_spans = int_param(request, "min_spans", default=0) or 0
        timeout_s = float(request.query_params.get("timeout", "0") or 0)
        deadline = time.monotonic() + min(timeout_s, 300.0)
        generation = ingestor.commit_generation
        spans = await store.rollout_spans(rollout_id, attempt_id)
        while len(spans) < min_spans and time.monotonic() < deadline:
            await ingestor.wait_for_commit(deadline - time.monotonic(), after=generation)
            generation = ingestor.commit_generation
            spans = await store.rollout_spans(rollout_id, attempt_id)
        if request.query_params.get("format") == "otlp":
            return FastJSONResponse({"rollout_id": rollout_id, **traces_data_json(spans)})
        flat = [flat_span(s) for s in spans]
        await attach_logs(store, flat)  # each span's log records among its events
        return FastJSONResponse({"rollout_id": rollout_id, "spans": flat})

    async def many_rollout_spans(request: Request) -> Response:
        try:
            body = await request.json()
            wanted = body["rollouts"]
            if not isinstance(wanted, list) or not all(isinstance(w, dict) and "rollout_id" in w for w in wanted):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise BadQuery(
                'body must be {"rollouts": [{"rollout_id": "...", "attempt_id"?: "...", "latest"?: true}, ...]}'
            ) from None
        if len(wanted) > 10_000:
            raise BadQuery("at most 10000 rollouts per request")
        wait_s = body.get("wait_complete_s", 0)
        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not 0 <= wait_s <= 300:
            raise BadQuery("wait_complete_s must be a number of seconds between 0 and 300")
        keys = [(str(w["rollout_id"]), "latest" if w.get("latest") else w.get("attempt_id")) for w in wanted]
        checked = "wait_complete_s" in body  # 0: check completeness without waiting
        if checked:
            found, incomplete = await read_complete(store, ingestor, keys, float(wait_s))
        else:
            found, incomplete = await store.attempts_spans(keys), {}
        flat = {key[0]: [flat_span(s) for s in spans] for key, spans in zip(keys, found, strict=True)}
        await attach_logs(store, [span for spans in flat.values() for span in spans])
        answer: dict[str, object] = {"rollouts": flat}
        if checked:
            answer["incomplete"] = {keys[index][0]: missing for index, missing in incomplete.items()}
        return FastJSONResponse(answer)

    return [
        Route("/v1/rollouts", rollouts),
        Route("/v1/rollouts/spans", many_rollout_spans, methods=["POST"]),
        Route("/v1/rollouts/{rollout_id}/spans", rollout_spans),
    ]
