"""An OpenAI-compatible test server on loopback that answers like vLLM, token ids included.

    with OpenAITestServer(replies=["SELECT 1;", Reply(tool_calls=[ToolCall("search", '{"q": "x"}')])]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test")

Endpoints: `POST /v1/chat/completions` (streaming, n > 1, tools), `POST /v1/completions`, `POST /v1/responses`,
`GET /v1/models`, `POST /tokenize` (vLLM's); `context_length` refuses a chat request over it with vLLM's 400. The prompt
is rendered with the ChatML template and tokenized by the tiny offline BPE; the reply is tokenized and ends with
`<|im_end|>` like a real generation. Token ids (`prompt_token_ids`, per-choice `token_ids`, streaming deltas) are
returned only when the request says `return_token_ids: true`, sampled logprobs only when asked, exactly as vLLM
does; `strict=True` makes it reject vLLM-only fields like api.openai.com would. Replies: a list consumed in order, a
callable `(body) -> str | Reply`, or by default an echo of the last user message. Every request body and its headers
are kept in `requests`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from lightning_otel.serving import vllm_format
from lightning_otel.serving.app_server import AppServer
from lightning_otel.serving.context_limits import vllm_message
from lightning_otel.serving.vllm_format import SampledChoice, stream_pieces
from lightning_otel.testing import responses_api
from lightning_otel.testing.replies import Generation, RecordedRequest, Reply, ReplySource, ServedCall
from lightning_otel.testing.tokenizer import ChatTokenizer, build_tokenizer

VLLM_ONLY_FIELDS = frozenset(
    {"return_token_ids", "top_k", "repetition_penalty", "enable_response_messages", "prompt_logprobs"}
)


class OpenAITestServer:
    """Serve the app with uvicorn in a background thread on 127.0.0.1 (a free port unless `port` is given)."""

    def __init__(
        self,
        replies: Iterable[str | Reply] | ReplySource | None = None,
        *,
        tokenizer: ChatTokenizer | None = None,
        model: str = "agl-tiny",
        strict: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        latency_s: float = 0.0,
        fail: Callable[[dict[str, Any]], int | None] | None = None,
        context_length: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer or build_tokenizer()
        self.context_length = context_length  # prompt + max_tokens over it: vLLM's 400 (None: no limit)
        self.fail = fail  # a fault to inject: the HTTP status to answer a request's body with (None: serve it)
        self.model = model
        self.strict = strict
        self.latency_s = latency_s
        # Set it (a test backend's publish does) and every answer names it, as our replicas name the weights'
        # version that sampled it (`agl_policy_version`).
        self.policy_version: int | None = None
        self.requests: list[RecordedRequest] = []
        self.served: dict[str, ServedCall] = {}
        self._scripted: deque[str | Reply] = deque()
        self._reply_fn: ReplySource | None = None
        self.set_replies(replies)
        self._ids = itertools.count(1)
        self._server = AppServer(self.app(), host=host, port=port, name="agl-openai-test-server")
        self.host, self.port = self._server.host, self._server.port

    def _version(self) -> dict[str, int]:
        from lightning_otel import semconv

        return {semconv.POLICY_VERSION_FIELD: self.policy_version} if self.policy_version is not None else {}

    # --- configuration ---------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def set_replies(self, replies: Iterable[str | Reply] | ReplySource | None) -> None:
        """Script the next replies (consumed in order, then echo), or a function choosing each reply."""
        self._scripted.clear()
        self._reply_fn = None
        if callable(replies):
            self._reply_fn = replies
        elif replies is not None:
            self._scripted.extend(replies)

    def reset(self) -> None:
        self.set_replies(None)
        self.requests.clear()
        self.served.clear()

    def _record(self, request: Any, response_id: str, prompt_ids: list[int], generations: list[Generation]) -> None:
        headers = dict(request.headers)
        self.served[response_id] = ServedCall(list(prompt_ids), [list(g.token_ids) for g in generations], headers)

    # --- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> OpenAITestServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> OpenAITestServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- replies ---------------------------------------------------------------------------------------------
    def _next_reply(self, body: dict[str, Any], prompt_text: str) -> Reply:
        if self._reply_fn is not None:
            reply: str | Reply = self._reply_fn(body)
        elif self._scripted:
            reply = self._scripted.popleft()
        else:
            reply = "You said: " + _last_user_text(body, prompt_text)
        return Reply(content=reply) if isinstance(reply, str) else reply

    def _generations(self, body: dict[str, Any], prompt_text: str) -> list[Generation]:
        count = int(body.get("n") or 1)
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or body.get("max_output_tokens")
        first = self._next_reply(body, prompt_text)
        replies = [first] + [
            Reply(content=f"{first.content or ''} ({index})", tool_calls=first.tool_calls) for index in range(1, count)
        ]
        return [Generation(self.tokenizer, reply, max_tokens) for reply in replies]

    # --- the ASGI app ----------------------------------------------------------------------------------------
    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response, StreamingResponse
        from starlette.routing import Route

        async def read(request: Request) -> dict[str, Any] | Response:
            try:
                body = json.loads(await request.body())
            except json.JSONDecodeError as exc:
                return _error(400, f"invalid JSON body: {exc}")
            if not isinstance(body, dict):
                return _error(400, "the request body must be a JSON object")
            self.requests.append(RecordedRequest(request.url.path, body, dict(request.headers)))
            if self.strict:
                unknown = sorted(VLLM_ONLY_FIELDS & body.keys())
                if unknown:
                    return _error(400, f"Unrecognized request argument supplied: {', '.join(unknown)}")
            if "model" not in body:
                return _error(400, "you must provide a model parameter")
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            status = self.fail(body) if self.fail is not None else None
            if status is not None:
                return _error(status, f"injected fault: HTTP {status}")
            return body

        def sse(events: AsyncIterator[str]) -> StreamingResponse:
            return StreamingResponse(events, media_type="text/event-stream")

        async def chat_completions(request: Request) -> Response:
            body = await read(request)
            if isinstance(body, Response):
                return body
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                return _error(400, "messages must be a non-empty list")
            prompt_text = self.tokenizer.render_chat(messages)
            prompt_ids = self.tokenizer.encode(prompt_text)
            asked = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
            if self.context_length is not None and len(prompt_ids) + asked > self.context_length:
                return _error(400, vllm_message(self.context_length, len(prompt_ids), asked))
            generations = self._generations(body, prompt_text)
            response_id = f"chatcmpl-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
            self._record(request, response_id, prompt_ids, generations)
            if body.get("stream"):
                return sse(self._chat_stream(body, response_id, prompt_ids, generations))
            return JSONResponse({**self._chat_response(body, response_id, prompt_ids, generations), **self._version()})

        async def completions(request: Request) -> Response:
            body = await read(request)
            if isinstance(body, Response):
                return body
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1:
                prompt = prompt[0]
            if not isinstance(prompt, str):
                return _error(400, "prompt must be a string")
            prompt_ids = self.tokenizer.encode(prompt)
            generations = self._generations(body, prompt)
            response_id = f"cmpl-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
            self._record(request, response_id, prompt_ids, generations)
            if body.get("stream"):
                return sse(self._completion_stream(body, response_id, prompt_ids, generations))
            return JSONResponse(
                {**self._completion_response(body, response_id, prompt_ids, generations), **self._version()}
            )

        async def responses(request: Request) -> Response:
            body = await read(request)
            if isinstance(body, Response):
                return body
            messages = responses_api.chat_messages(body)
            if not messages:
                return _error(400, "input must be a string or a list of messages")
            prompt_text = self.tokenizer.render_chat(messages)
            generation = self._generations({**body, "n": 1}, prompt_text)[0]
            response_id = f"resp_{next(self._ids)}_{uuid.uuid4().hex[:8]}"
            response = responses_api.response_object(body, prompt_text, generation, self.tokenizer, response_id,
                                                     self.model)  # fmt: skip
            if body.get("stream"):
                return sse(responses_api.response_stream(response, generation))
            return JSONResponse(response)

        async def models(request: Request) -> Response:
            return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "agl"}]})

        async def tokenize(request: Request) -> Response:  # vLLM's, at the server's root
            body = await read(request)
            if isinstance(body, Response):
                return body
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                return _error(400, "messages must be a non-empty list")
            tokens = self.tokenizer.encode(self.tokenizer.render_chat(messages))
            return JSONResponse({"count": len(tokens), "max_model_len": self.context_length, "tokens": tokens})

        return Starlette(
            routes=[
                Route("/v1/chat/completions", chat_completions, methods=["POST"]),
                Route("/v1/completions", completions, methods=["POST"]),
                Route("/v1/responses", responses, methods=["POST"]),
                Route("/v1/models", models, methods=["GET"]),
                Route("/tokenize", tokenize, methods=["POST"]),
            ]
        )

    # --- chat completions and completions: the shared vLLM-format builder ----------------------------------------
    def _sampled(
        self, generations: list[Generation], *, chat: bool, stream: bool, with_logprobs: bool
    ) -> list[SampledChoice]:
        eos = self.tokenizer.eos_token_id
        choices = []
        for generation in generations:
            with_tools = chat and bool(generation.reply.tool_calls) and generation.finish_reason != "length"
            tool_calls = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in generation.reply.tool_calls
            ]
            choices.append(
                SampledChoice(
                    token_ids=generation.token_ids,
                    logprobs=generation.logprobs,
                    text=generation.reply.content if with_tools else generation.text,
                    finish_reason=generation.finish_reason,
                    tool_calls=tool_calls if with_tools else [],
                    token_texts=[self.tokenizer.token_text(t) for t in generation.token_ids] if with_logprobs else [],
                    pieces=stream_pieces(self.tokenizer.decode, generation.token_ids, eos) if stream else [],
                )
            )
        return choices

    def _chat_response(
        self, body: dict[str, Any], response_id: str, prompt_ids: list[int], generations: list[Generation]
    ) -> dict[str, Any]:
        with_logprobs = bool(body.get("logprobs"))
        choices = self._sampled(generations, chat=True, stream=False, with_logprobs=with_logprobs)
        return vllm_format.chat_completion(
            response_id, body.get("model", self.model), prompt_ids, choices,
            with_ids=bool(body.get("return_token_ids")), with_logprobs=with_logprobs,
        )  # fmt: skip

    async def _chat_stream(
        self, body: dict[str, Any], response_id: str, prompt_ids: list[int], generations: list[Generation]
    ) -> AsyncIterator[str]:
        with_logprobs = bool(body.get("logprobs"))
        choices = self._sampled(generations, chat=True, stream=True, with_logprobs=with_logprobs)
        chunks = vllm_format.chat_completion_chunks(
            response_id, body.get("model", self.model), prompt_ids, choices,
            with_ids=bool(body.get("return_token_ids")), with_logprobs=with_logprobs,
            include_usage=bool((body.get("stream_options") or {}).get("include_usage")),
        )  # fmt: skip
        for chunk in chunks:
            yield vllm_format.sse(chunk)
            await asyncio.sleep(0)
        yield vllm_format.SSE_DONE

    def _completion_response(
        self, body: dict[str, Any], response_id: str, prompt_ids: list[int], generations: list[Generation]
    ) -> dict[str, Any]:
        with_logprobs = body.get("logprobs") is not None
        choices = self._sampled(generations, chat=False, stream=False, with_logprobs=with_logprobs)
        return vllm_format.text_completion(
            response_id, body.get("model", self.model), prompt_ids, choices,
            with_ids=bool(body.get("return_token_ids")), with_logprobs=with_logprobs,
        )  # fmt: skip

    async def _completion_stream(
        self, body: dict[str, Any], response_id: str, prompt_ids: list[int], generations: list[Generation]
    ) -> AsyncIterator[str]:
        choices = self._sampled(generations, chat=False, stream=True, with_logprobs=False)
        chunks = vllm_format.text_completion_chunks(
            response_id, body.get("model", self.model), prompt_ids, choices,
            with_ids=bool(body.get("return_token_ids")), with_logprobs=False,
        )  # fmt: skip
        for chunk in chunks:
            yield vllm_format.sse(chunk)
        yield vllm_format.SSE_DONE


def _last_user_text(body: dict[str, Any], prompt_text: str) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    for message in reversed(responses_api.chat_messages(body)):
        if message["role"] == "user":
            return str(message["content"] or "")
    return prompt_text[-200:]


def _error(status: int, message: str) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(vllm_format.error_body(message), status_code=status)


def main(argv: list[str] | None = None) -> None:
    """`python -m lightning_otel.testing --port 8000`: serve until interrupted."""
    import argparse

    parser = argparse.ArgumentParser(description="OpenAI-compatible test server with vLLM-format token ids")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--strict", action="store_true", help="reject vLLM-only fields like api.openai.com")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds to wait before each reply")
    args = parser.parse_args(argv)
    server = OpenAITestServer(host=args.host, port=args.port, strict=args.strict, latency_s=args.latency).start()
    print(f"OpenAI-compatible test server on {server.base_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
