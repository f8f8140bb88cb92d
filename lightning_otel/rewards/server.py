"""The reward-model service (`lightning-otel reward-model serve`): a trained reward model behind HTTP.

POST /score        {"model"?, "inputs": [{"id"?, "messages": [..., {"role": "assistant", "content": answer}]}]}
                   -> {"model", "model_version", "data": [{"index", "id", "score"}]}
POST /score-pair   {"messages": [question...], "chosen": answer, "rejected": answer}   (answers: text or message)
                   -> {"model", "model_version", "chosen_score", "rejected_score", "margin", "p_chosen"}
POST /classify     vLLM's classify API, as verl's reward loop calls it: {"model"?, "input": text | [text] | ids |
                   [ids], "use_activation"?: true} -> {"object": "list", "model", "data": [{"index", "label",
                   "probs": [score or sigmoid(score)], "num_classes": 1}], "usage"}
GET  /healthz      200 once the model scored a probe conversation at start; batch counters
GET  /v1/models    the served model

Concurrent requests are scored together (`MicroBatcher`: one forward pass per few milliseconds of arrivals).
`X-Request-Id` makes a request idempotent: a retry with the same id and body gets the first answer without a second
forward pass (the same id with another body is a 409). With an API key every route but /healthz needs
`Authorization: Bearer KEY`; the CLI refuses to listen beyond loopback without one. Bad input is a 400 naming
what is wrong; the service keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lightning_otel.collector.auth import bearer_ok
from lightning_otel.collector.declared_bodies import BadBody, Body, read_body
from lightning_otel.rewards.micro_batch import MicroBatcher
from lightning_otel.rewards.request_bodies import ClassifyBody, ScoreBody, ScorePairBody
from lightning_otel.rewards.scorer import RewardModelScorer, preference_probability

MAX_BODY_BYTES = 8 * 1024 * 1024
IDEMPOTENCY_ENTRIES = 4096


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)


def model_version(path: Path) -> str:
    """A short fingerprint of the weights: which reward model scored, in traces and answers."""
    digest = hashlib.sha256()
    for file in sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin")):
        stat = file.stat()
        digest.update(f"{file.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:12]


class _Idempotency:
    """Answers by request id (bounded): a retried request is answered from here, with no second forward pass."""

    def __init__(self) -> None:
        self._answers: OrderedDict[str, tuple[str, Any]] = OrderedDict()
        self._running: dict[str, tuple[str, asyncio.Future[Any]]] = {}

    async def answer(self, request_id: str | None, body_hash: str, compute: Any) -> Any:
        if request_id is None:
            return await compute()
        if request_id in self._answers:
            known_hash, answer = self._answers[request_id]
            if known_hash != body_hash:
                raise _Conflict(request_id)
            return answer
        if request_id in self._running:  # the retry arrived while the first try is still being scored
            running_hash, running = self._running[request_id]
            if running_hash != body_hash:
                raise _Conflict(request_id)
            return await asyncio.shield(running)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._running[request_id] = (body_hash, future)
        try:
            answer = await compute()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        finally:
            self._running.pop(request_id, None)
        future.set_result(answer)
        self._answers[request_id] = (body_hash, answer)
        while len(self._answers) > IDEMPOTENCY_ENTRIES:
            self._answers.popitem(last=False)
        return answer


class _Conflict(Exception):
    def __init__(self, request_id: str) -> None:
        super().__init__(f"request id {request_id!r} was already used for a different request")


class RewardService:
    """The service's state and its handlers (each takes its declared body, returns the answer): the scorer, its name
    and weights' fingerprint, the micro-batchers, the idempotency memory, and whether the probe passed."""

    def __init__(
        self, scorer: RewardModelScorer, *, served_name: str | None, max_batch: int, max_wait_s: float
    ) -> None:
        self.scorer = scorer
        self.name = served_name or scorer.name
        self.version = model_version(Path(scorer.path))
        self.idempotency = _Idempotency()
        self.ready = False
        self.max_batch, self.max_wait_s = max_batch, max_wait_s
        self.batchers: dict[str, MicroBatcher[Any, float]] = {}

    def batcher(self, kind: str) -> MicroBatcher[Any, float]:  # built lazily: it needs the server's event loop
        if kind not in self.batchers:
            scorer = self.scorer
            score = scorer.score_texts if kind == "text" else scorer.score_token_ids

            async def process(items: list[Any]) -> list[float]:
                return await asyncio.to_thread(score, items)

            self.batchers[kind] = MicroBatcher(process, max_batch=self.max_batch, max_wait_s=self.max_wait_s)
        return self.batchers[kind]

    async def score(self, body: ScoreBody) -> dict[str, Any]:
        texts = [self.scorer.render([m.model_dump() for m in item.messages]) for item in body.inputs]
        ids = [item.id if item.id is not None else index for index, item in enumerate(body.inputs)]
        scores = await self.batcher("text").submit(texts)
        data = [{"index": i, "id": ids[i], "score": s} for i, s in enumerate(scores)]
        return {"model": self.name, "model_version": self.version, "data": data}

    async def score_pair(self, body: ScorePairBody) -> dict[str, Any]:
        assert body.chosen is not None and body.rejected is not None  # the body's own check
        prompt = [m.model_dump() for m in body.messages]
        render = self.scorer.render
        a, b = await self.batcher("text").submit(
            [render([*prompt, body.chosen.model_dump()]), render([*prompt, body.rejected.model_dump()])]
        )
        return {"model": self.name, "model_version": self.version, "chosen_score": a, "rejected_score": b,
                "margin": a - b, "p_chosen": preference_probability(a, b)}  # fmt: skip

    async def classify(self, body: ClassifyBody) -> dict[str, Any]:
        kind, items = body.input
        scores = await self.batcher(kind).submit(items)
        if kind == "text":
            tokens = sum(len(self.scorer.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in items)
        else:
            tokens = sum(len(sequence) for sequence in items)
        data = [{"index": i, "label": "LABEL_0", "num_classes": 1,
                 "probs": [preference_probability(s, 0.0) if body.use_activation else s]}
                for i, s in enumerate(scores)]  # fmt: skip
        return {"id": f"classify-{time.time_ns()}", "object": "list", "created": int(time.time()), "model": self.name,
                "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}  # fmt: skip

    def health(self) -> tuple[int, dict[str, Any]]:
        stats = {
            kind: {k: getattr(b.stats, k) for k in ("requests", "items", "batches", "largest_batch")}
            for kind, b in self.batchers.items()
        }
        answer = {"status": "ok" if self.ready else "starting", "model": self.name, "model_version": self.version,
                  "batches": stats}  # fmt: skip
        return (200 if self.ready else 503), answer

    def models(self) -> dict[str, Any]:
        model = {"id": self.name, "object": "model", "owned_by": "lightning-otel", "root": self.scorer.path,
                 "model_version": self.version}  # fmt: skip
        return {"object": "list", "data": [model]}

    async def probe(self) -> None:
        """Score a probe conversation before serving: a model that scores it as NaN never serves."""
        probe = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]
        value = (await asyncio.to_thread(self.scorer.score, [probe]))[0]
        if not math.isfinite(value):
            raise RuntimeError(f"the reward model at {self.scorer.path} scores a probe as {value}")
        self.ready = True


@dataclass(frozen=True, slots=True)
class ScoringRoute:
    """A POST route: the `RewardService` method that answers it and the body it declares."""

    path: str
    handler: str
    body: type[Body]


SCORING_ROUTES = (
    ScoringRoute("/score", "score", ScoreBody),
    ScoringRoute("/score-pair", "score_pair", ScorePairBody),
    ScoringRoute("/classify", "classify", ClassifyBody),
    ScoringRoute("/v1/classify", "classify", ClassifyBody),
)


def build_reward_model_app(
    scorer: RewardModelScorer,
    *,
    api_key: str | None = None,
    served_name: str | None = None,
    max_batch: int = 32,
    max_wait_s: float = 0.005,
) -> Starlette:
    """`SCORING_ROUTES` (behind the bearer key, idempotent by `X-Request-Id`), /healthz and /v1/models over a
    `RewardService`; the scorer scores a probe before the app serves."""
    service = RewardService(scorer, served_name=served_name, max_batch=max_batch, max_wait_s=max_wait_s)

    def unauthorized(request: Request) -> Response | None:
        if bearer_ok(request.headers.get("authorization"), api_key):  # no key: open
            return None
        return JSONResponse({"error": {"message": "missing or wrong bearer token", "code": 401}}, status_code=401,
                            headers={"WWW-Authenticate": "Bearer"})  # fmt: skip

    def scoring(route: ScoringRoute) -> Route:
        answer = getattr(service, route.handler)

        async def endpoint(request: Request) -> Response:
            if (refused := unauthorized(request)) is not None:
                return refused
            raw = await request.body()
            try:
                decoded = _decoded(raw)
                if isinstance(decoded, dict) and decoded.get("model") not in (None, service.name):
                    raise BadBody(f"this service serves the model {service.name!r}, not {decoded['model']!r}")
                body = read_body(route.body, decoded)
                digest = hashlib.sha256(raw).hexdigest()
                result = await service.idempotency.answer(request.headers.get("x-request-id"), digest,
                                                          lambda: answer(body))  # fmt: skip
            except BadBody as exc:
                return _error(400, str(exc))
            except _Conflict as exc:
                return _error(409, str(exc))
            return JSONResponse(result)

        return Route(route.path, endpoint, methods=["POST"])

    async def health(request: Request) -> Response:
        status, answer = service.health()
        return JSONResponse(answer, status_code=status)

    async def models(request: Request) -> Response:
        return unauthorized(request) or JSONResponse(service.models())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await service.probe()
        yield

    routes = [*map(scoring, SCORING_ROUTES), Route("/healthz", health), Route("/v1/models", models)]
    return Starlette(routes=routes, lifespan=lifespan)


def _decoded(raw: bytes) -> object:
    if len(raw) > MAX_BODY_BYTES:
        raise BadBody(f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise BadBody(f"invalid JSON body: {exc}") from None
