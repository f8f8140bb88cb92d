"""The rollout view: `/ui` (a page shipped in the package, no CDN) and the JSON it reads.

GET /ui                                         the page (its files are open; every JSON route needs the token)
GET /v1/ui/config                               links to configured trace UIs, the tokenizer, whether auth is on
GET /v1/ui/runs                                 runs with their steps: rollouts, statuses, mean reward, versions
GET /v1/ui/runs/{run_id}/{mode}/{step}          a step's rollouts, each with what the adapter made of it
GET /v1/ui/rollouts/{rollout_id}                one rollout: attempts, span tree, LLM calls with tokens, samples
    the last two take `agent_match=REGEX` (default: the run's own) and the last `attempt_id`
"""

from __future__ import annotations

import json
import re
from importlib import resources
from types import EllipsisType

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.collector.query_params import BadQuery, FastJSONResponse
from lightning_otel.collector.reads.rollout_view import ViewSettings, rollout_view, runs, step_rollouts
from lightning_otel.collector.stores.store import SpanStore

_PAGE_FILES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
               "style.css": "text/css; charset=utf-8"}  # fmt: skip
UI_OPEN_PATHS = {"/ui", "/ui/", *(f"/ui/{name}" for name in _PAGE_FILES)}


def _page_file(name: str) -> bytes:
    return resources.files("lightning_otel.collector.reads").joinpath("ui", name).read_bytes()


def _agent_match(request: Request) -> str | dict[str, str] | EllipsisType | None:
    """`agent_match` as asked: absent -> the run's own (...); `agent_match=` (empty) -> every call (None); a JSON
    object -> a policy per agent (patterns to policy names)."""
    if "agent_match" not in request.query_params:
        return ...
    value = request.query_params["agent_match"]
    if not value:
        return None
    if value.lstrip().startswith("{"):
        try:
            mapping = json.loads(value)
            TraceToTriplet(agent_match=mapping)  # checked as the trainer checks it
        except (ValueError, TypeError) as exc:
            raise BadQuery(f"agent_match {value!r} is not a mapping of patterns to policy names: {exc}") from None
        return dict(mapping)
    try:
        re.compile(value)
    except re.error as exc:
        raise BadQuery(f"agent_match {value!r} is not a valid regular expression: {exc}") from None
    return value


def ui_routes(store: SpanStore, settings: ViewSettings, *, auth: bool) -> list[Route]:
    pages = {name: _page_file(name) for name in _PAGE_FILES}  # read once: the page is part of the package

    async def page(request: Request) -> Response:
        name = request.path_params.get("name") or "index.html"
        if name not in pages:
            return JSONResponse({"error": f"no page file {name!r}"}, status_code=404)
        return Response(pages[name], media_type=_PAGE_FILES[name], headers={"Cache-Control": "no-cache"})

    async def config(request: Request) -> Response:
        return JSONResponse(
            {
                "jaeger_ui_url": settings.jaeger_ui_url,
                "phoenix_ui_url": settings.phoenix_ui_url,
                "tokenizer": settings.token_text.label if settings.token_text else None,
                "auth": auth,
            }
        )

    async def list_runs(request: Request) -> Response:
        return FastJSONResponse(await runs(store))

    async def one_step(request: Request) -> Response:
        try:
            step = int(request.path_params["step"])
        except ValueError:
            raise BadQuery("step must be an integer") from None
        run_id, mode = request.path_params["run_id"], request.path_params["mode"]
        return FastJSONResponse(await step_rollouts(store, run_id, mode, step, _agent_match(request)))

    async def one_rollout(request: Request) -> Response:
        view = await rollout_view(
            store,
            request.path_params["rollout_id"],
            settings,
            attempt_id=request.query_params.get("attempt_id") or None,
            agent_match=_agent_match(request),
        )
        return FastJSONResponse(view)

    return [
        Route("/ui", page),
        Route("/ui/", page),
        Route("/ui/{name}", page),
        Route("/v1/ui/config", config),
        Route("/v1/ui/runs", list_runs),
        Route("/v1/ui/runs/{run_id}/{mode}/{step}", one_step),
        Route("/v1/ui/rollouts/{rollout_id}", one_rollout),
    ]
