"""vLLM's OpenAI-compatible API over any sampler: `SamplerReplica` answers `/v1/chat/completions` and
`/v1/completions` with top-level `prompt_token_ids`, per choice `token_ids` and the sampled tokens' `logprobs`
(streaming included), and names the weights' version that sampled each answer (`agl_policy_version`, a top-level
field like vLLM's `prompt_token_ids`: the agent's instrumented client and the policy gateway record it on their
spans). Like vLLM, it renders a request's tools with the chat template, refuses a request over the model's context
with vLLM's 400 (`max_model_len`), reads tool calls out of a reply to a request with tools as vLLM's `hermes` parser
does (`tool_call_parser`), and answers `/tokenize`. A subclass only generates (`generate`; `agenerate` too
where it can wait without a thread): `CPUReplica` (an HF model on this machine), the Tinker backend's engine
samplers. `ReplicaServer` serves one on loopback. Needs no torch.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lightning_otel import semconv
from lightning_otel.serving import vllm_format
from lightning_otel.serving.app_server import AppServer, json_object_body, openai_error
from lightning_otel.serving.context_limits import vllm_message
from lightning_otel.serving.tool_parsers import TOOL_CALL_PARSERS, ParsedReply, parse_tool_calls
from lightning_otel.serving.vllm_format import SampledChoice, stream_pieces


class ChatTokenizerLike(Protocol):
    eos_token_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def render_chat(self, messages: Sequence[Any], add_generation_prompt: bool = True) -> str: ...


def render_prompt(tokenizer: ChatTokenizerLike, messages: Sequence[Any], tools: Any = None) -> str:
    """The chat rendered as the model sees it: with the request's tools where the tokenizer's template takes them
    (an HF template that names `tools`, as vLLM renders them), else without."""
    if tools and isinstance(tokenizer, HFChatTokenizer):
        return tokenizer.render_chat(messages, tools=tools)
    return tokenizer.render_chat(messages)


class HFChatTokenizer:
    """A `transformers` tokenizer seen as a `ChatTokenizerLike` (its own chat template renders conversations)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos_token_id: int = tokenizer.eos_token_id
        self.vocab_size: int = len(tokenizer)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def render_chat(self, messages: Sequence[Any], add_generation_prompt: bool = True, tools: Any = None) -> str:
        # A turn with no content (an assistant's tool calls) reaches the template as "", as vLLM passes it: templates
        # that add `message['content']` as a string (SmolLM2's) fail on None.
        chat = [{**message, "content": message.get("content") or ""} for message in map(dict, messages)]
        return self.tokenizer.apply_chat_template(
            chat, tools=tools or None, tokenize=False, add_generation_prompt=add_generation_prompt
        )


@dataclass(slots=True)
class Generation:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (end token) or "length"
    version: int = 0  # the weights' version that sampled it
    policy: str | None = None  # a policy per agent: the policy that sampled it (None: the replica's one model)


class UnknownModel(LookupError):
    """A request named a model the replica does not serve (vLLM answers 404)."""


class SamplerReplica(abc.ABC):
    """vLLM's OpenAI-compatible API over a sampler: a subclass implements `generate` (prompt token ids in; sampled
    ids, their logprobs and the weights' version out) and keeps `weight_version`."""

    def __init__(
        self,
        tokenizer: ChatTokenizerLike,
        *,
        model_name: str = "agl-policy",
        max_model_len: int | None = None,
        tool_call_parser: str | None = "hermes",
    ) -> None:
        if tool_call_parser is not None and tool_call_parser not in TOOL_CALL_PARSERS:
            raise ValueError(f"unknown tool_call_parser {tool_call_parser!r}: one of {TOOL_CALL_PARSERS} or None")
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_model_len = max_model_len  # prompt + new tokens, as vLLM's --max-model-len (None: unbounded)
        # vLLM's --tool-call-parser: a chat request that offers tools gets the calls read from the reply's text
        self.tool_call_parser = tool_call_parser
        self.weight_version = 0

    @abc.abstractmethod
    def generate(self, prompt_ids: Sequence[int], *, max_tokens: int = 64, temperature: float = 1.0,
                 top_p: float = 1.0) -> Generation: ...  # fmt: skip

    async def agenerate(self, prompt_ids: Sequence[int], *, max_tokens: int = 64, temperature: float = 1.0,
                        top_p: float = 1.0) -> Generation:  # fmt: skip
        """`generate` from an event loop (in a worker thread here; a batching sampler overrides it)."""
        return await asyncio.to_thread(
            self.generate, prompt_ids, max_tokens=max_tokens, temperature=temperature, top_p=top_p
        )

    def served_models(self) -> list[str]:
        """The model names requests may ask for (`/v1/models`)."""
        return [self.model_name]

    def route(self, model: Any) -> str:
        """The served model a request's `model` asks for, named in the answer (one model: whatever it asks; a replica
        of several policies raises UnknownModel for a name it does not serve)."""
        return self.model_name

    async def agenerate_as(self, model: str, prompt_ids: Sequence[int], *, max_tokens: int, temperature: float,
                           top_p: float) -> Generation:  # fmt: skip
        """`agenerate` by the served model `route` chose (one model: the same)."""
        return await self.agenerate(prompt_ids, max_tokens=max_tokens, temperature=temperature, top_p=top_p)

    # --- the OpenAI-compatible API ------------------------------------------------------------------------------
    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            body = await json_object_body(request)
            if isinstance(body, Response):
                return body
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                return openai_error(400, "messages must be a non-empty list")
            prompt_ids = self.tokenizer.encode(render_prompt(self.tokenizer, messages, body.get("tools")))
            return await self._respond(body, prompt_ids, chat=True)

        async def tokenize(request: Request) -> Response:
            """vLLM's `/tokenize`: a chat's (or a prompt's) token ids as the model would see them, no sampling."""
            body = await json_object_body(request)
            if isinstance(body, Response):
                return body
            if isinstance(body.get("messages"), list):
                text = render_prompt(self.tokenizer, body["messages"], body.get("tools"))
            elif isinstance(body.get("prompt"), str):
                text = body["prompt"]
            else:
                return openai_error(400, "give messages (a list) or prompt (a string)")
            tokens = self.tokenizer.encode(text)
            return JSONResponse({"count": len(tokens), "max_model_len": self.max_model_len, "tokens": tokens})

        async def completions(request: Request) -> Response:
            body = await json_object_body(request)
            if isinstance(body, Response):
                return body
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                return openai_error(400, "prompt must be a string")
            return await self._respond(body, self.tokenizer.encode(prompt), chat=False)

        async def models(request: Request) -> Response:
            served = [{"id": name, "object": "model"} for name in self.served_models()]
            return JSONResponse({"object": "list", "data": served})

        return Starlette(
            routes=[
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/v1/completions", completions, methods=["POST"]),
                Route("/v1/models", models),
                Route("/tokenize", tokenize, methods=["POST"]),
            ]
        )

    async def _respond(self, body: dict[str, Any], prompt_ids: list[int], *, chat: bool) -> Response:
        try:
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 64)
            temperature = float(body.get("temperature", 1.0))
            top_p = float(body.get("top_p", 1.0))
        except (TypeError, ValueError) as exc:
            return openai_error(400, f"bad sampling parameter: {exc}")
        if self.max_model_len is not None and len(prompt_ids) + max_tokens > self.max_model_len:
            return openai_error(400, vllm_message(self.max_model_len, len(prompt_ids), max_tokens))
        try:
            model = self.route(body.get("model"))
        except UnknownModel:  # vLLM's answer to a model (LoRA adapter) it does not serve
            return openai_error(404, f"The model `{body.get('model')}` does not exist.")
        generation = await self.agenerate_as(model, prompt_ids, max_tokens=max_tokens, temperature=temperature,
                                             top_p=top_p)  # fmt: skip
        with_ids = bool(body.get("return_token_ids"))
        with_logprobs = body.get("logprobs") not in (None, False)
        stream = bool(body.get("stream"))
        eos = self.tokenizer.eos_token_id
        ids = generation.token_ids
        text = self.tokenizer.decode([t for t in ids if t != eos])
        reply = parse_tool_calls(self.tool_call_parser, text, body) if chat else ParsedReply(text)
        sampled = SampledChoice(
            token_ids=ids,
            logprobs=generation.logprobs,
            text=reply.content,
            finish_reason="tool_calls" if reply.tool_calls else generation.finish_reason,
            tool_calls=reply.tool_calls,
            token_texts=[self.tokenizer.decode([t]) for t in ids] if with_logprobs else [],
            pieces=stream_pieces(self.tokenizer.decode, ids, eos) if stream else [],
        )
        response_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:16]}"
        version: dict[str, Any] = {semconv.POLICY_VERSION_FIELD: generation.version}  # which weights sampled it
        if generation.policy is not None:
            version[semconv.POLICY_FIELD] = generation.policy
        args = (response_id, model, prompt_ids, [sampled])
        if stream:
            chunks = (
                vllm_format.chat_completion_chunks(*args, with_ids=with_ids, with_logprobs=with_logprobs)
                if chat
                else vllm_format.text_completion_chunks(*args, with_ids=with_ids, with_logprobs=with_logprobs)
            )
            first = next(chunks)
            chunks = itertools.chain([{**first, **version}], chunks)
            events = itertools.chain(map(vllm_format.sse, chunks), [vllm_format.SSE_DONE])
            return StreamingResponse(events, media_type="text/event-stream")
        build = vllm_format.chat_completion if chat else vllm_format.text_completion
        return JSONResponse({**build(*args, with_ids=with_ids, with_logprobs=with_logprobs), **version})


class ReplicaServer(AppServer):
    """Serve a replica on loopback in a background thread: `with ReplicaServer(replica) as server: server.base_url`."""

    def __init__(self, replica: SamplerReplica, *, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(replica.app(), host=host, port=port, name="agl-cpu-replica")
        self.replica = replica
