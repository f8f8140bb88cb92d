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
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lightning_otel.collector.auth import bearer_ok
from lightning_otel.rewards.micro_batch import MicroBatcher
from lightning_otel.rewards.scorer import RewardModelScorer, preference_probability

MAX_INPUTS = 256
MAX_BODY_BYTES = 8 * 1024 * 1024
IDEMPOTENCY_ENTRIES = 4096


class BadInput(ValueError):
    """A request this service cannot answer as given (400)."""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)


def _messages(value: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise BadInput(f'{where}: "messages" must be a non-empty list of {{"role", "content"}} objects')
    for index, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise BadInput(f'{where}: message {index} needs a string "role"')
        if not isinstance(message.get("content"), str):
            raise BadInput(f'{where}: message {index} needs a string "content"')
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _answer(value: Any, name: str) -> dict[str, str]:
    if isinstance(value, str):
        return {"role": "assistant", "content": value}
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return {"role": str(value.get("role", "assistant")), "content": value["content"]}
    raise BadInput(f'"{name}" must be the answer text or an {{"role": "assistant", "content"}} message')


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


def build_reward_model_app(
    scorer: RewardModelScorer,
    *,
    api_key: str | None = None,
    served_name: str | None = None,
    max_batch: int = 32,
    max_wait_s: float = 0.005,
) -> Starlette:
    name = served_name or scorer.name
    version = model_version(Path(scorer.path))
    idempotency = _Idempotency()
    state: dict[str, Any] = {"ready": False, "started": time.time()}

    async def score_texts(texts: list[str]) -> list[float]:
        return await asyncio.to_thread(scorer.score_texts, texts)

    async def score_ids(sequences: list[list[int]]) -> list[float]:
        return await asyncio.to_thread(scorer.score_token_ids, sequences)

    batchers: dict[str, MicroBatcher[Any, float]] = {}

    def batcher(kind: str) -> MicroBatcher[Any, float]:  # built lazily: it needs the server's event loop
        if kind not in batchers:
            process = score_texts if kind == "text" else score_ids
            batchers[kind] = MicroBatcher(process, max_batch=max_batch, max_wait_s=max_wait_s)
        return batchers[kind]

    async def body_of(request: Request) -> tuple[dict[str, Any], str]:
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            raise BadInput(f"the body is larger than {MAX_BODY_BYTES} bytes")
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise BadInput(f"invalid JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise BadInput("the body must be a JSON object")
        if body.get("model") not in (None, name):
            raise BadInput(f"this service serves the model {name!r}, not {body['model']!r}")
        return body, hashlib.sha256(raw).hexdigest()

    async def handle(request: Request, compute: Any) -> Response:
        if not bearer_ok(request.headers.get("authorization"), api_key):  # no key: open
            return JSONResponse(
                {"error": {"message": "missing or wrong bearer token", "code": 401}},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        try:
            body, body_hash = await body_of(request)
            answer = await idempotency.answer(request.headers.get("x-request-id"), body_hash, lambda: compute(body))
        except BadInput as exc:
            return _error(400, str(exc))
        except _Conflict as exc:
            return _error(409, str(exc))
        return JSONResponse(answer)

    async def score(body: dict[str, Any]) -> dict[str, Any]:
        inputs = body.get("inputs")
        if not isinstance(inputs, list) or not 1 <= len(inputs) <= MAX_INPUTS:
            raise BadInput(f'"inputs" must be a list of 1 to {MAX_INPUTS} {{"id"?, "messages"}} objects')
        texts, ids = [], []
        for index, item in enumerate(inputs):
            if not isinstance(item, dict):
                raise BadInput(f"input {index} must be an object")
            messages = _messages(item.get("messages"), f"input {index}")
            if messages[-1]["role"] != "assistant":
                raise BadInput(f"input {index}: the last message must be the assistant's answer to score")
            texts.append(scorer.render(messages))
            ids.append(item.get("id", index))
        scores = await batcher("text").submit(texts)
        return {
            "model": name,
            "model_version": version,
            "data": [{"index": i, "id": ids[i], "score": s} for i, s in enumerate(scores)],
        }

    async def score_pair(body: dict[str, Any]) -> dict[str, Any]:
        prompt = _messages(body.get("messages"), "the request")
        chosen, rejected = _answer(body.get("chosen"), "chosen"), _answer(body.get("rejected"), "rejected")
        a, b = await batcher("text").submit([scorer.render([*prompt, chosen]), scorer.render([*prompt, rejected])])
        return {
            "model": name,
            "model_version": version,
            "chosen_score": a,
            "rejected_score": b,
            "margin": a - b,
            "p_chosen": preference_probability(a, b),
        }

    async def classify(body: dict[str, Any]) -> dict[str, Any]:
        given = body.get("input")
        activation = body.get("use_activation", True)
        if not isinstance(activation, bool):
            raise BadInput('"use_activation" must be true or false')
        if isinstance(given, str) or (isinstance(given, list) and given and all(isinstance(t, str) for t in given)):
            texts = [given] if isinstance(given, str) else given
            if len(texts) > MAX_INPUTS or not all(texts):
                raise BadInput(f'"input" must hold 1 to {MAX_INPUTS} non-empty texts')
            scores = await batcher("text").submit(list(texts))
            tokens = sum(len(scorer.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
        elif isinstance(given, list) and given and (all(_is_id(x) for x in given) or all(_is_ids(x) for x in given)):
            sequences = [given] if _is_id(given[0]) else given
            if len(sequences) > MAX_INPUTS or not all(sequences):
                raise BadInput(f'"input" must hold 1 to {MAX_INPUTS} non-empty token id lists')
            scores = await batcher("ids").submit([list(s) for s in sequences])
            tokens = sum(len(s) for s in sequences)
        else:
            raise BadInput('"input" must be a text, a list of texts, a list of token ids, or a list of those')
        data = [
            {
                "index": i,
                "label": "LABEL_0",
                "num_classes": 1,
                "probs": [preference_probability(s, 0.0) if activation else s],
            }
            for i, s in enumerate(scores)
        ]
        return {
            "id": f"classify-{time.time_ns()}",
            "object": "list",
            "created": int(time.time()),
            "model": name,
            "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    async def health(request: Request) -> Response:
        stats = {
            kind: {k: getattr(b.stats, k) for k in ("requests", "items", "batches", "largest_batch")}
            for kind, b in batchers.items()
        }
        status = 200 if state["ready"] else 503
        return JSONResponse(
            {
                "status": "ok" if state["ready"] else "starting",
                "model": name,
                "model_version": version,
                "batches": stats,
            },
            status_code=status,
        )

    async def models(request: Request) -> Response:
        if not bearer_ok(request.headers.get("authorization"), api_key):  # no key: open
            return _error(401, "missing or wrong bearer token")
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "owned_by": "lightning-otel",
                        "root": scorer.path,
                        "model_version": version,
                    }
                ],
            }
        )

    def route(compute: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            return await handle(request, compute)

        return endpoint

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        probe = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]
        value = (await asyncio.to_thread(scorer.score, [probe]))[0]
        if not math.isfinite(value):
            raise RuntimeError(f"the reward model at {scorer.path} scores a probe as {value}")
        state["ready"] = True
        yield

    return Starlette(
        routes=[
            Route("/score", route(score), methods=["POST"]),
            Route("/score-pair", route(score_pair), methods=["POST"]),
            Route("/classify", route(classify), methods=["POST"]),
            Route("/v1/classify", route(classify), methods=["POST"]),
            Route("/healthz", health),
            Route("/v1/models", models),
        ],
        lifespan=lifespan,
    )


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_id(x) for x in value)
