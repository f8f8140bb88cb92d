"""The policy gateway: the OpenAI-compatible endpoint agents see as `main_llm`, in front of the policy's replicas.

    gateway = PolicyGateway(["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"], sampling={"temperature": 1.0})
    with GatewayServer(gateway) as server:             # server.base_url -> LLM(server.base_url, model)
        gateway.pause()                                 # weights syncing: 503 + Retry-After
        gateway.resume()
        with gateway.held():                            # asynchronous training's weight swap: new requests wait,
            replicas.load(new_weights)                  # the ones in flight finish first (drained), then resume

Every chat/completions request is forwarded to one replica, sticky by rollout id (rendezvous hashing, so a rollout
keeps its replica's prefix cache and few rollouts move when replicas change), with the trainer's sampling
parameters enforced (`sampling` while training, `validation_sampling` in `mode="val"` or for the rollouts named in
`validate_rollouts`, so validation can run beside training rollouts; the reply budget is a cap: an agent asking for
fewer tokens gets fewer) and token ids and logprobs always requested. `put_context` puts a system message before
every chat call of given rollouts (the self-distillation teacher's context: its check runs the policy with it).
Streams pass through as the replica sends them. The gateway records its own LLM span (child of the
caller's `traceparent`, attributed through baggage) so agents that cannot be instrumented, in other processes or
languages, still yield exact token ids; clients that cannot send headers put the rollout in the path:
`/rollout/{rollout_id}/attempt/{attempt_id}/v1/chat/completions` (see `ProxyLLM`), and name their agent with an
`x-agl-agent-name` header (the span's `gen_ai.agent.name`, which `agent_match` reads); a harness that exports its
own spans is joined to the gateway's by conversation (`serving.harness_headers`, `adapters.harness_calls`). When the
client's instrumentor records the same call, both spans carry the same response id and the adapter keeps one.

A policy per agent (`policies`: `agent_match` as a mapping, `adapters.policy_match`): each call is served by its
agent's policy, named to the replica in the request's `model` as vLLM names a LoRA adapter. The agent is the one the
call names (`x-agl-agent-name`, which the capture layer sends for every call made inside a named agent, or a
harness's headers); a call that names none may name its policy in `model`; a call no pattern claims is served by the
base model (policy "base", never trained). The span records the policy (`agl.llm.policy`); an agent whose name
matches two policies' patterns is answered 400 and kept in `policy_conflicts` (the trainer stops on it).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import itertools
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import httpx
from opentelemetry import context, trace
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lightning_otel import semconv
from lightning_otel.capture.agent_naming import context_with_agent
from lightning_otel.capture.llm_call import LLMCall
from lightning_otel.capture.propagation import extract_context
from lightning_otel.capture.rollout_context import context_with_rollout, current_rollout
from lightning_otel.capture.token_id_params import CHAT, missing_token_id_params
from lightning_otel.serving import messages_dialect, openai_dialect
from lightning_otel.serving.app_server import AppServer, json_object_body, openai_error
from lightning_otel.serving.context_limits import overflow_in
from lightning_otel.serving.enforced_sampling import enforced_sampling
from lightning_otel.serving.gateway_dialects import TRANSLATED, context_error_response, error_response
from lightning_otel.serving.harness_headers import agent_from_headers, conversation_from_headers
from lightning_otel.serving.openai_dialect import ENDPOINTS
from lightning_otel.serving.stream_relay import relay_stream
from lightning_otel.serving.weight_hold import WeightHold
from lightning_otel.tls_context import shared_tls_context

if TYPE_CHECKING:
    pass

# Headers that describe one hop, not the request: never forwarded.
_HOP_HEADERS = frozenset(
    {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade", "accept-encoding"}
)


class PolicyRouting(Protocol):
    """Which policy serves an agent's calls (`adapters.policy_match.PolicyMatch` is one)."""

    @property
    def policies(self) -> list[str]: ...

    def policy_of(self, agent_name: str | None) -> str | None:
        """The agent's policy (None: none claims it); ValueError when two policies claim it."""
        ...


class _PolicyConflict(Exception):
    """Two policies claim the call's agent: the call is answered 400."""


class PolicyGateway:
    def __init__(
        self,
        replicas: Sequence[str],
        *,
        sampling: Mapping[str, Any] | None = None,
        validation_sampling: Mapping[str, Any] | None = None,
        tracer: trace.Tracer | None = None,
        timeout_s: float = 600.0,
        model: str | None = None,
        policies: PolicyRouting | None = None,
    ) -> None:
        if not replicas:
            raise ValueError("the gateway needs at least one replica URL")
        self.replicas = [replica.rstrip("/") for replica in replicas]
        self.sampling = dict(sampling or {})
        self.validation_sampling = dict(validation_sampling if validation_sampling is not None else self.sampling)
        self.mode = "train"
        self.model = model  # the name the replicas serve, set on every request (agents may send any name)
        self.policies = policies  # a policy per agent: which policy (served model) each agent's calls go to
        self.policy_conflicts: list[str] = []  # agents matched by two policies' patterns (each refused with a 400)
        self.tracer = tracer
        self.timeout_s = timeout_s
        self.hold = WeightHold()  # pause() and held(): requests refused or kept waiting while weights change
        self._val_rollouts: set[str] = set()
        self._contexts: dict[str, str] = {}  # rollout id -> a system message put before each of its chat calls
        self._served: collections.Counter[tuple[str, str]] = collections.Counter()  # per rollout attempt
        self._round_robin = itertools.count()
        self._http: httpx.AsyncClient | None = None

    # --- control (the trainer's side) --------------------------------------------------------------------------
    def pause(self) -> None:
        """Refuse new requests with 503 + Retry-After (weights are syncing); requests in flight finish."""
        self.hold.paused = True

    def resume(self) -> None:
        self.hold.paused = False

    def held(self, drain_timeout_s: float = 600.0) -> contextlib.AbstractContextManager[int]:
        """While the weights change under running rollouts: new requests wait here (no 503: the agent sees a slow
        call, not an error), the ones in flight finish on the old weights, then requests resume on the new ones.
        No response mixes weights. Yields how many requests were in flight when the hold began."""
        return self.hold.held(drain_timeout_s)

    @property
    def pause_s_total(self) -> float:
        """Time spent held (the weight swaps of asynchronous training)."""
        return self.hold.held_s_total

    def validate_rollouts(self, rollout_ids: Sequence[str], *, done: bool = False) -> None:
        """Serve these rollouts with `validation_sampling` whatever the mode (`done=True`: forget them)."""
        if done:
            self._val_rollouts.difference_update(rollout_ids)
        else:
            self._val_rollouts.update(rollout_ids)

    def put_context(self, contexts: Mapping[str, str], *, done: bool = False) -> None:
        """Before each chat call of these rollouts, a system message with the rollout's text, first in the call's
        messages (the loop's teacher reads its context the same way: a system turn before the prompt). The span
        records the call as the replica answered it, context included. `done=True`: forget them."""
        if done:
            for rollout_id in contexts:
                self._contexts.pop(rollout_id, None)
        else:
            self._contexts.update(contexts)

    def set_mode(self, mode: str) -> None:
        if mode not in ("train", "val"):
            raise ValueError(f"mode must be 'train' or 'val', got {mode!r}")
        self.mode = mode

    def calls_served(self, attempts: Sequence[tuple[str, str]]) -> int:
        """How many calls the replicas answered for these (rollout id, attempt id)s; they are forgotten here."""
        return sum(self._served.pop(attempt, 0) for attempt in attempts)

    def replica_for(self, rollout_id: str | None) -> str:
        """Rendezvous hashing on the rollout id; round robin for requests outside any rollout."""
        if not rollout_id:
            return self.replicas[next(self._round_robin) % len(self.replicas)]
        return max(self.replicas, key=lambda replica: hashlib.blake2b(f"{replica}|{rollout_id}".encode()).digest())

    # --- serving -----------------------------------------------------------------------------------------------
    def app(self) -> Starlette:
        async def proxy(request: Request) -> Response:
            return await self._proxy(request)

        def dialect_route(dialect: str) -> Callable[[Request], Any]:
            async def speak(request: Request) -> Response:
                return await self._proxy(request, dialect)

            return speak

        async def models(request: Request) -> Response:
            try:
                upstream = await self._client().get(f"{self.replica_for(None)}/models")
            except httpx.HTTPError as exc:
                return openai_error(502, f"replica unreachable: {exc}")
            return Response(upstream.content, upstream.status_code, media_type="application/json")

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            yield
            if self._http is not None:  # the upstream client belongs to this loop: close it here
                await self._http.aclose()
                self._http = None

        async def count_tokens(request: Request) -> Response:
            return await self._count_tokens(request)

        prefix = "/rollout/{rollout_id}/attempt/{attempt_id}"
        routes = [Route("/v1/models", models), Route(prefix + "/v1/models", models)]
        routes += [Route(f"{base}/v1/messages/count_tokens", count_tokens, methods=["POST"]) for base in ("", prefix)]
        for path in ENDPOINTS:
            routes += [
                Route(f"/v1/{path}", proxy, methods=["POST"]),
                Route(f"{prefix}/v1/{path}", proxy, methods=["POST"]),
            ]
        for dialect, speech in TRANSLATED.items():
            speak = dialect_route(dialect)
            routes += [Route(f"{base}/v1/{speech.path}", speak, methods=["POST"]) for base in ("", prefix)]
        return Starlette(routes=routes, lifespan=lifespan)

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=self.timeout_s, limits=httpx.Limits(max_connections=1000), verify=shared_tls_context()
            )
        return self._http

    def _tracer(self) -> trace.Tracer:
        if self.tracer is None:
            from lightning_otel.capture.setup import get_tracer

            self.tracer = get_tracer()
        return self.tracer

    async def _proxy(self, request: Request, dialect: str = openai_dialect.DIALECT) -> Response:
        if self.hold.paused:
            return error_response(dialect, 503, "the policy is being updated; retry shortly", {"Retry-After": "1"})
        await self.hold.enter()
        streaming = False
        try:
            forwarded = (
                self._forward(request) if dialect == openai_dialect.DIALECT else self._forward_dialect(request, dialect)
            )
            response = await forwarded
            streaming = isinstance(response, StreamingResponse)
            return response
        except _PolicyConflict as exc:  # a configuration error: said to the agent, and to the trainer
            self.policy_conflicts.append(str(exc))
            return error_response(dialect, 400, str(exc))
        finally:
            if not streaming:  # a stream leaves when its last byte is sent (relay's finally)
                self.hold.leave()

    async def _forward(self, request: Request) -> Response:
        path = request.url.path.split("/v1/", 1)[1]
        kind, operation = ENDPOINTS[path]
        body = await json_object_body(request)
        if isinstance(body, Response):
            return body
        call, url, headers, identity = self._start_call(request, kind, operation, path, body)
        if body.get("stream"):
            return await relay_stream(self._client(), call, url, headers, body, leave=self.hold.leave_once(),
                                      served=lambda: self._count(identity))  # fmt: skip
        upstream = await self._post(call, url, headers, body, identity)
        if isinstance(upstream, Response):
            return upstream
        media_type = upstream.headers.get("content-type", "application/json")
        return Response(upstream.content, upstream.status_code, media_type=media_type)

    async def _forward_dialect(self, request: Request, dialect: str) -> Response:
        """Another API than chat (`TRANSLATED`): asked of the replica as a chat completion, answered in the dialect."""
        speech = TRANSLATED[dialect]
        read = await self._dialect_request(request, dialect, speech.chat_request)
        if isinstance(read, Response):
            return read
        body, chat = read
        call, url, headers, identity = self._start_call(request, CHAT, semconv.OP_CHAT, "chat/completions", chat,
                                                        dialect=dialect)  # fmt: skip
        upstream = await self._post(call, url, headers, chat, identity, dialect)
        if isinstance(upstream, Response):
            return upstream
        if upstream.status_code >= 400:
            if upstream.status_code == 400 and (overflow := overflow_in(upstream.text)):
                return context_error_response(dialect, overflow)  # in the words the harness acts on (compaction)
            return error_response(dialect, upstream.status_code, f"the policy replica answered: {upstream.text[:500]}")
        answer = speech.answer(upstream.json(), body)
        if body.get("stream"):
            return StreamingResponse(speech.events(answer), media_type="text/event-stream")
        return JSONResponse(answer)

    async def _dialect_request(
        self, request: Request, dialect: str, to_chat: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, Any]] | Response:
        """A dialect's request body and the chat request that asks the same, or the 400 to answer with (invalid
        JSON, or a request the dialect cannot carry), in the dialect's shape."""
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict):
                raise messages_dialect.DialectError("the request body must be a JSON object")
            return body, to_chat(body)
        except ValueError as exc:
            return error_response(dialect, 400, f"invalid request: {exc}")

    async def _count_tokens(self, request: Request) -> Response:
        """Anthropic's `/v1/messages/count_tokens`: the prompt's tokens as the replica renders it (vLLM's
        `/tokenize` on the rollout's replica); no call is made or recorded."""
        dialect = messages_dialect.DIALECT
        read = await self._dialect_request(request, dialect, messages_dialect.count_request)
        if isinstance(read, Response):
            return read
        _, chat = read
        replica = self.replica_for(request.path_params.get("rollout_id"))
        asked = {"model": self.model or chat.get("model"), "messages": chat["messages"], "add_generation_prompt": True}
        if chat.get("tools"):
            asked["tools"] = chat["tools"]
        try:
            upstream = await self._client().post(f"{replica.removesuffix('/v1')}/tokenize", json=asked)
        except httpx.HTTPError as exc:
            return error_response(dialect, 502, f"replica {replica} unreachable: {exc}")
        if upstream.status_code >= 400:
            return error_response(dialect, 502, f"the policy replica cannot count tokens (its /tokenize answered "
                                             f"HTTP {upstream.status_code}: {upstream.text[:300]})")  # fmt: skip
        return JSONResponse({"input_tokens": int(upstream.json()["count"])})

    def _start_call(
        self, request: Request, kind: str, operation: str, path: str, body: dict[str, Any], dialect: str | None = None
    ) -> tuple[LLMCall, str, dict[str, str], Any]:
        """The call's span, its upstream URL and headers, and its rollout identity (the body gets the run's sampling,
        the served model's name and the token-id parameters)."""
        ctx = extract_context(request.headers)
        rollout_id = request.path_params.get("rollout_id")
        if rollout_id:
            ctx = context_with_rollout(rollout_id, request.path_params.get("attempt_id", ""), ctx)
        if agent_name := agent_from_headers(request.headers):
            ctx = context_with_agent(agent_name, ctx)  # a bare client names its agent: agent_match can select it
        policy = self._policy_for(agent_name, body.get("model")) if self.policies is not None else None
        identity = current_rollout(ctx)
        validating = self.mode == "val" or (identity is not None and identity.rollout_id in self._val_rollouts)
        body.update(enforced_sampling(body, self.validation_sampling if validating else self.sampling))
        text = self._contexts.get(identity.rollout_id) if identity is not None else None
        if text and isinstance(body.get("messages"), list):
            body["messages"] = [{"role": "system", "content": text}, *body["messages"]]
        if self.model:
            body["model"] = self.model
        if policy is not None and policy != semconv.BASE_POLICY:
            body["model"] = policy  # the replica serves each policy under its name, as vLLM serves a LoRA adapter
        body.update(missing_token_id_params(kind, body))
        url = f"{self.replica_for(identity.rollout_id if identity else None)}/{path}"
        token = context.attach(ctx)
        try:
            call = LLMCall(self._tracer(), operation=operation, body=body, url=url, provider="vllm",
                           token_ids_requested=True)  # fmt: skip
        finally:
            context.detach(token)
        if dialect:
            call.extra_attributes[semconv.AGL_LLM_DIALECT] = dialect
        if policy is not None:
            call.extra_attributes[semconv.AGL_LLM_POLICY] = policy
        if conversation := conversation_from_headers(request.headers):
            call.extra_attributes[semconv.GEN_AI_CONVERSATION_ID] = conversation
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        return call, url, headers, identity

    def _policy_for(self, agent_name: str | None, model: Any) -> str:
        """The policy that serves a call: its agent's (AmbiguousPolicy when two claim it), else the one its `model`
        names when it names no agent, else the base model's."""
        assert self.policies is not None
        if agent_name:
            try:
                return self.policies.policy_of(agent_name) or semconv.BASE_POLICY
            except ValueError as exc:
                raise _PolicyConflict(str(exc)) from None
        if isinstance(model, str) and model in self.policies.policies:
            return model
        return semconv.BASE_POLICY

    async def _post(
        self, call: LLMCall, url: str, headers: dict[str, str], body: dict[str, Any], identity: Any,
        dialect: str = openai_dialect.DIALECT,
    ) -> httpx.Response | Response:  # fmt: skip
        """The replica's whole answer, recorded on the call's span (or the 502 to answer, in the agent's dialect, when
        the replica is unreachable)."""
        try:
            upstream = await self._client().post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            call.finish(error=exc)
            return error_response(dialect, 502, f"replica {url} unreachable: {exc}")
        if upstream.status_code < 400:
            call.record_completion(upstream.json())
            call.finish()
            self._count(identity)
        else:
            call.finish(error=RuntimeError(f"replica answered HTTP {upstream.status_code}"))
        return upstream

    def _count(self, identity: Any) -> None:
        if identity is not None:
            self._served[(identity.rollout_id, identity.attempt_id)] += 1


class GatewayServer(AppServer):
    """Serve a gateway on loopback in a background thread: `with GatewayServer(gateway) as server: server.base_url`."""

    def __init__(self, gateway: PolicyGateway, *, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(gateway.app(), host=host, port=port, name="agl-gateway")
        self.gateway = gateway


__all__ = ["GatewayServer", "PolicyGateway", "PolicyRouting"]
