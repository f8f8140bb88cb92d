"""The rollout queue's routes (served on the query port, behind the same bearer token), as data: `QUEUE_ROUTES`, one
`QueueRoute` each (path, method, handler, declared body), and their bodies as models.

POST /v1/queue/enqueue     {"rollouts": [{"input": ..., "task_id"?, "group_id"?, "mode"?, "max_attempts"?,
                            "timeout_s"?, "metadata"?, "rollout_id"?, "resources_version"?}],
                            "if_exists"?: "error" | "return"}    "return": ids already queued are returned as
                            they are (a repeated request), not an error
POST /v1/queue/claim       {"runner_id": "...", "max": 8, "wait_s": 10, "run_id"?}   long-poll: answers when work
                           arrives, attempts of one run: `run_id`'s (a runner serving it) or the oldest claimable
                           rollout's -> {"attempts", "heartbeat_interval_s", "run": {"run_id", "state"} | null,
                           "live_runs": n}
POST /v1/queue/heartbeat   {"runner_id": "...", "attempts": [{"rollout_id", "attempt_id"}]} -> {"stop": [...]}
POST /v1/queue/complete    {"rollout_id", "attempt_id", "status": "succeeded"|"failed", "error"?, "reward"?,
                           "cause"?: "infrastructure:..."|"policy:..."|"agent_error:..."}, or
                           {"reports": [such objects]} -> {"results": [{"accepted", "rollout_status"}]}
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
POST /v1/resources {"resources": {...}, "run_id"?} -> {"version"}
GET  /v1/resources/latest[?run_id=]  the newest on the collector; with run_id, that run's (one that published
                           none reads those published outside any run) | /v1/resources/{version}
POST /v1/runs {"run_id", "lease_s"?: 60} -> {"run", "cancelled"}   a run starts holding a lease; the unfinished
                           rollouts of runs no longer running are cancelled (no live run's are touched)
POST /v1/runs/{run_id}/renew -> {"run"}       POST /v1/runs/{run_id}/end {"state": "finished"|"failed"}
GET  /v1/runs[?state=running&limit=]          GET /v1/runs/{run_id}

A body that is not what its route declares is a 400 naming the field (`declared_bodies`); the queue's own refusals
(an unknown status, a bad rollout) are 400s too, an unknown rollout or resources version a 404.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import orjson
from pydantic import Field, model_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lightning_otel.collector.declared_bodies import BadBody, Body, between, holding, read_body, shaped
from lightning_otel.collector.query_params import BadQuery, FastJSONResponse, error_envelope
from lightning_otel.collector.queue.rollout_state import (
    AttemptReport,
    InvalidRequest,
    NotFound,
    RolloutSpec,
    RolloutState,
)
from lightning_otel.collector.queue_schema import FINAL_STATUSES, MAX_LEASE_S, MIN_LEASE_S, QUEUING, RUN_STATES, RUNNING

MAX_BATCH = 10_000
RolloutIds = Annotated[list[str], holding(0, MAX_BATCH, "rollout ids")]


# --- the bodies ---------------------------------------------------------------------------------------------------
class EnqueueBody(Body):
    rollouts: Annotated[list[Any], holding(1, MAX_BATCH, "rollouts")]
    if_exists: Literal["error", "return"] = "error"


class ClaimBody(Body):
    runner_id: str
    max: Annotated[int, between(1, 1000)] = 1
    wait_s: float = 0.0
    run_id: str | None = None


class AttemptRef(Body):
    rollout_id: str
    attempt_id: str

    _shape = model_validator(mode="before")(shaped('a {"rollout_id", "attempt_id"} object'))


class HeartbeatBody(Body):
    runner_id: str
    attempts: Annotated[list[AttemptRef], holding(0, MAX_BATCH, "attempts")]


class ReportBody(Body):
    rollout_id: str
    attempt_id: str
    status: str
    error: str | None = None
    reward: float | None = None
    cause: Annotated[str, Field(pattern=r"^(infrastructure|policy|agent_error):.+", max_length=500)] | None = None

    _shape = model_validator(mode="before")(shaped('a {"rollout_id", "attempt_id", "status"} object'))

    def report(self) -> AttemptReport:
        return AttemptReport(self.rollout_id, self.attempt_id, self.status, self.error, self.reward, self.cause)


class ReportsBody(Body):
    reports: Annotated[list[ReportBody], holding(0, MAX_BATCH, "reports")]


class WaitBody(Body):
    rollout_ids: RolloutIds
    timeout_s: float = 30.0
    records: Literal["all", "final", "none"] = "all"


class CancelBody(Body):
    rollout_ids: RolloutIds


class LostBody(Body):
    error: str = "runner process exited"


class ResourcesBody(Body):
    resources: dict[str, Any]
    run_id: str | None = None


class StartRunBody(Body):
    run_id: Annotated[str, Field(min_length=1, max_length=200)]
    lease_s: Annotated[float, between(MIN_LEASE_S, MAX_LEASE_S)] = 60.0


class EndRunBody(Body):
    state: Literal["finished", "failed"]


# --- the handlers: (queue, request, body) -> JSON -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Queue:
    """What the handlers serve: the rollout state, and this collector described to runners (its OTLP ports)."""

    state: RolloutState
    info: Callable[[], dict[str, Any]]


async def collector_info(queue: Queue, request: Request, body: None) -> Any:
    return {**queue.info(), "heartbeat_interval_s": queue.state.heartbeat_interval_s}


async def enqueue(queue: Queue, request: Request, body: EnqueueBody) -> Any:
    specs = [RolloutSpec.from_json(spec) for spec in body.rollouts]
    return {"rollouts": await queue.state.enqueue(specs, existing_ok=body.if_exists == "return")}


async def claim(queue: Queue, request: Request, body: ClaimBody) -> Any:
    attempts = await queue.state.claim(
        body.runner_id, body.max, body.wait_s, run_id=body.run_id, gone=request.is_disconnected
    )  # a parked claim whose runner left takes nothing
    answer = {"attempts": attempts, "heartbeat_interval_s": queue.state.heartbeat_interval_s}
    # What the runner serves, so it can follow its run and stop or move on when the run ends. Attempts come from a
    # run that was running when they were claimed (no read more on a busy claim); an idle claim reads the run's state.
    if attempts:
        served = attempts[0]["run_id"]
        return {**answer, "run": {"run_id": served, "state": "running"} if served else None, "live_runs": None}
    state, live = await queue.state.run_state(body.run_id)
    run = {"run_id": body.run_id, "state": state or "unknown"} if body.run_id is not None else None
    return {**answer, "run": run, "live_runs": live}


async def heartbeat(queue: Queue, request: Request, body: HeartbeatBody) -> Any:
    return {"stop": await queue.state.heartbeat([(a.rollout_id, a.attempt_id) for a in body.attempts])}


async def complete(queue: Queue, request: Request, body: dict[str, Any]) -> Any:
    """One report (the body itself) or many (`reports`): one path, each batch ended in one transaction."""
    single = "reports" not in body
    if single:
        reports = [read_body(ReportBody, body).report()]
    else:
        reports = [item.report() for item in read_body(ReportsBody, body).reports]
    results = await queue.state.complete_many(reports)
    if not single:
        return {"results": [{"accepted": ok, "rollout_status": status} for ok, status in results]}
    ((accepted, status),) = results
    if status is None:
        raise NotFound(f"no rollout {reports[0].rollout_id!r}")
    return {"accepted": accepted, "rollout_status": status}


async def wait(queue: Queue, request: Request, body: WaitBody) -> Any:
    done, found, unfinished = await queue.state.wait(body.rollout_ids, body.timeout_s, body.records)
    return {"done": done, "unfinished": unfinished, "rollouts": found}


async def cancel(queue: Queue, request: Request, body: CancelBody) -> Any:
    return {"cancelled": await queue.state.cancel(body.rollout_ids)}


async def runner_lost(queue: Queue, request: Request, body: LostBody) -> Any:
    return {"failed": await queue.state.fail_runner(request.path_params["runner_id"], body.error)}


async def list_rollouts(queue: Queue, request: Request, body: None) -> Any:
    return {"rollouts": await queue.state.list(_status(request), _limit(request, 100))}


async def page(queue: Queue, request: Request, body: None) -> Any:
    order = request.query_params.get("order", "position")
    after = request.query_params.get("after") or None
    records, cursor = await queue.state.page(_status(request), order, after, _limit(request, 500))
    return {"rollouts": records, "next": cursor}


async def stats(queue: Queue, request: Request, body: None) -> Any:
    return {"counts": await queue.state.counts(_status(request))}


async def rollout(queue: Queue, request: Request, body: None) -> Any:
    return await queue.state.rollout(request.path_params["rollout_id"])


async def put_resources(queue: Queue, request: Request, body: ResourcesBody) -> Any:
    return {"version": await queue.state.put_resources(body.resources, body.run_id)}


async def get_resources(queue: Queue, request: Request, body: None) -> Any:
    which = request.path_params["version"]
    if which != "latest" and not which.isdigit():
        raise BadQuery('the version must be a number or "latest"')
    run_id = request.query_params.get("run_id") or None
    return await queue.state.resources(None if which == "latest" else int(which), run_id)


async def start_run(queue: Queue, request: Request, body: StartRunBody) -> Any:
    run, cancelled = await queue.state.start_run(body.run_id, body.lease_s)
    return {"run": run, "cancelled": cancelled}


async def renew_run(queue: Queue, request: Request, body: None) -> Any:
    return {"run": await queue.state.renew_run(request.path_params["run_id"])}


async def end_run(queue: Queue, request: Request, body: EndRunBody) -> Any:
    run, cancelled = await queue.state.end_run(request.path_params["run_id"], body.state)
    return {"run": run, "cancelled": cancelled}


async def get_run(queue: Queue, request: Request, body: None) -> Any:
    run_id = request.path_params["run_id"]
    run = await queue.state.run(run_id)
    if run is None:
        raise NotFound(f"no run {run_id!r}")
    return run


async def list_runs(queue: Queue, request: Request, body: None) -> Any:
    state = request.query_params.get("state") or None
    if state is not None and state not in RUN_STATES:
        raise BadQuery(f"unknown run state {state!r}: one of {sorted(RUN_STATES)}")
    return {"runs": await queue.state.runs(state, _limit(request, 100))}


def _status(request: Request) -> str | None:
    """The `status` query parameter: None or one of the queue's statuses (anything else is a 400)."""
    status = request.query_params.get("status") or None
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


# --- the routes, as data --------------------------------------------------------------------------------------------
Handler = Callable[[Queue, Request, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class QueueRoute:
    """One route: `body` the model its JSON body must be (None: no body read; `dict`: read as an object, the handler
    declares the rest; an empty body is `{}` where `empty_ok`)."""

    path: str
    handler: Handler
    method: str = "GET"
    body: type[Body] | type[dict] | None = None
    empty_ok: bool = False


QUEUE_ROUTES = (
    QueueRoute("/v1/collector", collector_info),
    QueueRoute("/v1/queue/enqueue", enqueue, "POST", EnqueueBody),
    QueueRoute("/v1/queue/claim", claim, "POST", ClaimBody),
    QueueRoute("/v1/queue/heartbeat", heartbeat, "POST", HeartbeatBody),
    QueueRoute("/v1/queue/complete", complete, "POST", dict),
    QueueRoute("/v1/queue/wait", wait, "POST", WaitBody),
    QueueRoute("/v1/queue/cancel", cancel, "POST", CancelBody),
    QueueRoute("/v1/queue/runners/{runner_id}/lost", runner_lost, "POST", LostBody, empty_ok=True),
    QueueRoute("/v1/queue/rollouts", list_rollouts),
    QueueRoute("/v1/queue/rollouts/page", page),
    QueueRoute("/v1/queue/stats", stats),
    QueueRoute("/v1/rollouts/{rollout_id}", rollout),
    QueueRoute("/v1/resources", put_resources, "POST", ResourcesBody),
    QueueRoute("/v1/resources/{version}", get_resources),
    QueueRoute("/v1/runs", start_run, "POST", StartRunBody),
    QueueRoute("/v1/runs", list_runs),
    QueueRoute("/v1/runs/{run_id}", get_run),
    QueueRoute("/v1/runs/{run_id}/renew", renew_run, "POST"),
    QueueRoute("/v1/runs/{run_id}/end", end_run, "POST", EndRunBody),
)


def queue_routes(state: RolloutState, info: Callable[[], dict[str, Any]]) -> list[Route]:
    """`QUEUE_ROUTES` served over `state`; `info()` describes this collector to runners (its OTLP ports), so a runner
    needs only the query URL."""
    queue = Queue(state, info)
    return [Route(route.path, _endpoint(queue, route), methods=[route.method]) for route in QUEUE_ROUTES]


def _endpoint(queue: Queue, route: QueueRoute) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        body: Any = None
        if route.body is not None:
            raw = await request.body()
            if not raw and route.empty_ok:
                raw = b"{}"
            try:
                decoded = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise BadQuery("the body must be a JSON object") from None
            if not isinstance(decoded, dict):
                raise BadQuery("the body must be a JSON object")
            body = decoded if route.body is dict else read_body(route.body, decoded)
        return FastJSONResponse(await route.handler(queue, request, body))

    return endpoint


async def _bad_body(request: Request, exc: Exception) -> Response:
    return JSONResponse(error_envelope(400, str(exc)), status_code=400)


async def _not_found(request: Request, exc: Exception) -> Response:
    return JSONResponse(error_envelope(404, str(exc)), status_code=404)


# by class and subclass: a run refused is an InvalidRequest, a run not found a NotFound
EXCEPTION_HANDLERS = {InvalidRequest: _bad_body, BadBody: _bad_body, NotFound: _not_found}

__all__ = ["EXCEPTION_HANDLERS", "QUEUE_ROUTES", "QueueRoute", "queue_routes"]
