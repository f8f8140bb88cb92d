"""Wrappers for `litellm.completion` / `litellm.acompletion` and ADK's `LiteLLMClient.acompletion`.

The LiteLLM span is the LLM span. When LiteLLM goes through the OpenAI client (`openai/` models), the OpenAI
layer sees our call in the context, adds no span of its own and feeds the raw server response (token ids
included) into this one. The `hosted_vllm/` provider never touches the OpenAI client; its ids arrive in
`choices[i].provider_specific_fields["token_ids"]`.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import wrapt
from opentelemetry import context, trace

from lightning_otel import semconv
from lightning_otel.capture.llm_call import LLMCall, active_llm_call
from lightning_otel.capture.settings import settings
from lightning_otel.capture.token_id_params import CHAT, missing_token_id_params

_PROVIDER_NAMES = {"hosted_vllm": "vllm", "vllm": "vllm", "openai": "openai", "azure": "azure.ai.openai"}
_SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "seed",
    "stop",
    "frequency_penalty",
    "presence_penalty",
)


@functools.lru_cache(maxsize=512)
def _route(model: str, api_base: str | None) -> tuple[str, str, str | None]:
    """(model as sent, provider, endpoint URL) for a LiteLLM model string."""
    try:
        import litellm

        sent_model, provider, _, resolved_base = litellm.get_llm_provider(model=model, api_base=api_base)
    except Exception:
        sent_model, provider, resolved_base = (
            model,
            model.split("/", 1)[0] if "/" in model else "openai",
            None,
        )
    return sent_model, provider, api_base or resolved_base


def _start(tracer: trace.Tracer, args: tuple, kwargs: dict) -> tuple[LLMCall, dict]:
    model = str(kwargs.get("model") or (args[0] if args else ""))
    messages = kwargs.get("messages") if "messages" in kwargs else (args[1] if len(args) > 1 else None)
    sent_model, provider, url = _route(model, kwargs.get("api_base") or kwargs.get("base_url"))
    wants_ids = settings.wants_token_ids(url) if url else settings.wants_token_ids(f"litellm://{provider}")
    body = {key: kwargs[key] for key in _SAMPLING_KEYS if key in kwargs}
    body["messages"] = messages or []
    call = LLMCall(
        tracer,
        operation=semconv.OP_CHAT,
        body=body,
        url=url,
        provider=_PROVIDER_NAMES.get(provider, provider),
        token_ids_requested=wants_ids,
        request_model=sent_model,
    )
    if wants_ids:
        extra_body = dict(kwargs.get("extra_body") or {})
        params = missing_token_id_params(CHAT, kwargs, extra_body)
        if params:
            kwargs = {**kwargs, "extra_body": {**extra_body, **params}}
    return call, kwargs


def _record(call: LLMCall, method: Callable[[Any], None], item: Any) -> None:
    if not call.fed_by_inner:  # else the OpenAI layer underneath already has the raw server response
        method(item)


class _ObservedStream(wrapt.ObjectProxy):  # type: ignore[misc]
    """LiteLLM's stream wrapper, recording chunks and ending the span when the stream ends or is dropped."""

    def __init__(self, stream: Any, call: LLMCall) -> None:
        super().__init__(stream)
        self._self_call = call
        weakref.finalize(self, call.finish, stream_complete=False)

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        try:
            chunk = self.__wrapped__.__next__()
        except StopIteration:
            self._self_call.finish()
            raise
        except Exception as exc:
            self._self_call.finish(error=exc)
            raise
        _record(self._self_call, self._self_call.record_chunk, chunk)
        return chunk

    def __aiter__(self) -> Any:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self.__wrapped__.__anext__()
        except StopAsyncIteration:
            self._self_call.finish()
            raise
        except Exception as exc:
            self._self_call.finish(error=exc)
            raise
        _record(self._self_call, self._self_call.record_chunk, chunk)
        return chunk


def _finish(call: LLMCall, result: Any, streaming: bool) -> Any:
    if streaming and (hasattr(result, "__next__") or hasattr(result, "__anext__")):
        return _ObservedStream(result, call)
    _record(call, call.record_completion, result)
    call.finish()
    return result


def make_sync_wrapper(tracer: trace.Tracer) -> Callable[..., Any]:
    def completion_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if active_llm_call() is not None:  # an outer LiteLLM layer owns this call
            return wrapped(*args, **kwargs)
        call, kwargs = _start(tracer, args, kwargs)
        token = context.attach(call.context())
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            call.finish(error=exc)
            raise
        finally:
            context.detach(token)
        return _finish(call, result, bool(kwargs.get("stream")))

    return completion_wrapper


def make_async_wrapper(tracer: trace.Tracer) -> Callable[..., Any]:
    async def acompletion_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        if active_llm_call() is not None:
            return await wrapped(*args, **kwargs)
        call, kwargs = _start(tracer, args, kwargs)
        token = context.attach(call.context())
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            call.finish(error=exc)
            raise
        finally:
            context.detach(token)
        return _finish(call, result, bool(kwargs.get("stream")))

    return acompletion_wrapper
