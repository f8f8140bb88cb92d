"""REST routes of the rollout queue (served on the query port, behind the same bearer token).

POST /v1/queue/enqueue     {"rollouts": [{"input": ..., "task_id"?, "group_id"?, "mode"?, "max_attempts"?,
                            "timeout_s"?, "metadata"?, "rollout_id"?, "resources_version"?}],
                            "if_exists"?: "error" | "return"}    "return": ids already queued are returned as
                            they are (a repeated request), not an error
POST /v1/queue/claim       {"runner_id": "...", "max": 8, "wait_s": 10}      long-poll: answers when work arrives
POST /v1/queue/heartbeat   {"runner_id": "...", "attempts": [{"rollout_id", "attempt_id"}]} -> {"stop": [...]}
POST /v1/queue/complete    {"rollout_id", "attempt_id", "status": "succeeded"|"failed", "error"?, "reward"?}
POST /v1/queue/wait        {"rollout_ids": [...], "timeout_s": 30, "records"?: "all"|"final"|"none"}
                           long-poll: answers when all are final -> {"done", "unfinished": {"queuing": n,
                           "running": n}, "rollouts": [...]}; "final"/"none": a poller that does not need every
                           record at every poll
POST /v1/queue/cancel      {"rollout_ids": [...]}
POST /v1/queue/runners/{runner_id}/lost   {"error"?}                        fail a dead runner's attempts now
GET  /v1/queue/rollouts?status=queuing&limit=100     GET /v1/queue/stats[?status=running]
GET  /v1/queue/rollouts/page?order=position|group&status=&after=CURSOR&limit=500
                           every rollout oldest first, a page at a time -> {"rollouts": [...], "next": CURSOR|null}
GET  /v1/rollouts/{rollout_id}                       one rollout with its attempts
POST /v1/resources {"resources": {...}} -> {"version"}   GET /v1/resources/latest | /v1/resources/{version}
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lightning_otel.collector.jaeger_json import error_envelope
from lightning_otel.collector.query_params import BadQuery, FastJSONResponse
from lightning_otel.collector.queue_schema import FINAL_STATUSES, QUEUING, RUNNING
from lightning_otel.collector.rollout_state import (
    WAIT_RECORDS,
    AttemptReport,
    InvalidRequest,
    NotFound,
    RolloutSpec,
    RolloutState,
)

MAX_BATCH = 10_000


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise BadQuery("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise BadQuery("the body must be a JSON object")
    return body


def _field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    value = body.get(name)
    if value is None:
        if default is ...:
            raise BadQuery(f'"{name}" is required')
        return default
    if isinstance(value, bool) or not isinstance(value, kind):  # bool is an int to Python, never valid here
        raise BadQuery(f'"{name}" has the wrong type: {type(value).__name__}')
    if isinstance(value, float) and not math.isfinite(value):  # Python's json reads NaN; no store keeps it alike
        raise BadQuery(f'"{name}" must be a finite number, got {value}')
    return value


def _ids(body: dict[str, Any], name: str = "rollout_ids") -> list[str]:
    ids = _field(body, name, list)
    if not all(isinstance(i, str) for i in ids) or len(ids) > MAX_BATCH:
        raise BadQuery(f'"{name}" must be a list of at most {MAX_BATCH} strings')
    return ids


def _attempt_pairs(body: dict[str, Any]) -> list[tuple[str, str]]:
    attempts = _field(body, "attempts", list)
    try:
        return [(str(a["rollout_id"]), str(a["attempt_id"])) for a in attempts]
    except (TypeError, KeyError):
        raise BadQuery('"attempts" must be a list of {"rollout_id", "attempt_id"} objects') from None


def _report(body: dict[str, Any]) -> AttemptReport:
    reward = _field(body, "reward", (int, float), None)
    return AttemptReport(
        _field(body, "rollout_id", str),
        _field(body, "attempt_id", str),
        _field(body, "status", str),
        _field(body, "error", str, None),
        None if reward is None else float(reward),
    )


def _known_status(status: str | None) -> str | None:
    """A status query parameter: None or one of the queue's statuses (anything else is a 400)."""
    if status is not None and status not in FINAL_STATUSES | {QUEUING, RUNNING}:
        raise BadQuery(f"unknown status {status!r}")
    return status


def _limit(request: Request, default: int) -> int:
    """The `limit` query parameter, kept within 1..MAX_BATCH."""
    try:
        limit = int(request.query_params.get("limit", str(default)))
    except ValueError:
        raise BadQuery("limit must be an integer") from None
    return max(1, min(limit, MAX_BATCH))


def rollout_routes(state: RolloutState, info: Callable[[], dict[str, Any]]) -> list[Route]:
    """`info()` describes this collector to runners (its OTLP ports), so a runner needs only the query URL."""

    async def collector_info(request: Request) -> Response:
        return JSONResponse({**info(), "heartbeat_interval_s": state.heartbeat_interval_s})

    async def enqueue(request: Request) -> Response:
        body = await _body(request)
        specs = _field(body, "rollouts", list)
        if not specs or len(specs) > MAX_BATCH:
            raise BadQuery(f'"rollouts" must hold 1 to {MAX_BATCH} rollouts')
        if_exists = _field(body, "if_exists", str, "error")
        if if_exists not in ("error", "return"):
            raise BadQuery('"if_exists" must be "error" or "return"')
        try:
            parsed = [RolloutSpec.from_json(spec) for spec in specs]
        except TypeError as exc:
            raise BadQuery(f"bad rollout: {exc}") from None
        return FastJSONResponse({"rollouts": await state.enqueue(parsed, existing_ok=if_exists == "return")})

    async def claim(request: Request) -> Response:
        body = await _body(request)
        runner_id = _field(body, "runner_id", str)
        limit = _field(body, "max", int, 1)
        wait_s = float(_field(body, "wait_s", (int, float), 0))
        if not 1 <= limit <= 1000:
            raise BadQuery('"max" must be between 1 and 1000')
        attempts = await state.claim(runner_id, limit, wait_s)
        return FastJSONResponse({"attempts": attempts, "heartbeat_interval_s": state.heartbeat_interval_s})

    async def heartbeat(request: Request) -> Response:
        body = await _body(request)
        _field(body, "runner_id", str)
        return JSONResponse({"stop": await state.heartbeat(_attempt_pairs(body))})

    async def complete(request: Request) -> Response:
        body = await _body(request)
        if "reports" not in body:
            report = _report(body)
            accepted, status = await state.complete(
                report.rollout_id, report.attempt_id, report.status, error=report.error, reward=report.reward
            )
            return JSONResponse({"accepted": accepted, "rollout_status": status})
        reports = _field(body, "reports", list)
        if len(reports) > MAX_BATCH or not all(isinstance(item, dict) for item in reports):
            raise BadQuery(f'"reports" must be a list of at most {MAX_BATCH} objects')
        results = await state.complete_many([_report(item) for item in reports])
        return JSONResponse({"results": [{"accepted": ok, "rollout_status": status} for ok, status in results]})

    async def wait(request: Request) -> Response:
        body = await _body(request)
        records = _field(body, "records", str, "all")
        if records not in WAIT_RECORDS:
            raise BadQuery(f'"records" must be one of {", ".join(WAIT_RECORDS)}')
        timeout_s = float(_field(body, "timeout_s", (int, float), 30))
        done, found, unfinished = await state.wait(_ids(body), timeout_s, records)
        return FastJSONResponse({"done": done, "unfinished": unfinished, "rollouts": found})

    async def cancel(request: Request) -> Response:
        return JSONResponse({"cancelled": await state.cancel(_ids(await _body(request)))})

    async def runner_lost(request: Request) -> Response:
        body = await _body(request) if await request.body() else {}
        error = _field(body, "error", str, None) or "runner process exited"
        return JSONResponse({"failed": await state.fail_runner(request.path_params["runner_id"], error)})

    async def list_rollouts(request: Request) -> Response:
        status = _known_status(request.query_params.get("status") or None)
        return FastJSONResponse({"rollouts": await state.list(status, _limit(request, 100))})

    async def page(request: Request) -> Response:
        status = _known_status(request.query_params.get("status") or None)
        order = request.query_params.get("order", "position")
        after = request.query_params.get("after") or None
        records, cursor = await state.page(status, order, after, _limit(request, 500))
        return FastJSONResponse({"rollouts": records, "next": cursor})

    async def stats(request: Request) -> Response:
        status = _known_status(request.query_params.get("status"))
        return JSONResponse({"counts": await state.counts(status)})

    async def rollout(request: Request) -> Response:
        return FastJSONResponse(await state.rollout(request.path_params["rollout_id"]))

    async def put_resources(request: Request) -> Response:
        resources = _field(await _body(request), "resources", dict)
        return JSONResponse({"version": await state.put_resources(resources)})

    async def get_resources(request: Request) -> Response:
        which = request.path_params["version"]
        if which != "latest" and not which.isdigit():
            raise BadQuery('the version must be a number or "latest"')
        return FastJSONResponse(await state.resources(None if which == "latest" else int(which)))

    return [
        Route("/v1/collector", collector_info),
        Route("/v1/queue/enqueue", enqueue, methods=["POST"]),
        Route("/v1/queue/claim", claim, methods=["POST"]),
        Route("/v1/queue/heartbeat", heartbeat, methods=["POST"]),
        Route("/v1/queue/complete", complete, methods=["POST"]),
        Route("/v1/queue/wait", wait, methods=["POST"]),
        Route("/v1/queue/cancel", cancel, methods=["POST"]),
        Route("/v1/queue/runners/{runner_id}/lost", runner_lost, methods=["POST"]),
        Route("/v1/queue/rollouts", list_rollouts),
        Route("/v1/queue/rollouts/page", page),
        Route("/v1/queue/stats", stats),
        Route("/v1/rollouts/{rollout_id}", rollout),
        Route("/v1/resources", put_resources, methods=["POST"]),
        Route("/v1/resources/{version}", get_resources),
    ]


async def invalid_request(request: Request, exc: Exception) -> Response:
    return JSONResponse(error_envelope(400, str(exc)), status_code=400)


async def not_found(request: Request, exc: Exception) -> Response:
    return JSONResponse(error_envelope(404, str(exc)), status_code=404)


EXCEPTION_HANDLERS = {InvalidRequest: invalid_request, NotFound: not_found}
