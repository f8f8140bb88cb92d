"""Wrappers for `SyncAPIClient.request` / `AsyncAPIClient.request` (openai 2.x and 3.x).

That single point sees `chat.completions.create` (and `.parse()`, `.with_raw_response`,
`.with_streaming_response`, `stream=True`), `completions.create`, `responses.create` and bare `client.post`.
Four return shapes come back: a model object, a `LegacyAPIResponse`, a `Stream`/`AsyncStream`, an `APIResponse`;
raw responses of LLM calls are parsed here (parses are cached, the caller gets the same object).
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import context, trace

from lightning_otel import semconv
from lightning_otel.capture.llm_call import LLMCall, active_llm_call
from lightning_otel.capture.propagation import inject_current
from lightning_otel.capture.settings import settings
from lightning_otel.capture.token_id_params import CHAT, COMPLETIONS, RESPONSES, missing_token_id_params

try:  # openai's parsed responses are pydantic models (a failing hasattr on one costs microseconds)
    from pydantic import BaseModel as ParsedModel
except ImportError:  # pragma: no cover - openai depends on pydantic
    ParsedModel = ()  # type: ignore[assignment,misc]

_OPERATION = {CHAT: semconv.OP_CHAT, COMPLETIONS: semconv.OP_TEXT_COMPLETION, RESPONSES: semconv.OP_CHAT}


def classify(options: Any) -> str | None:
    """Which LLM endpoint a request targets (None: not an LLM call, e.g. models.list or embeddings)."""
    return _endpoint_kind(str(getattr(options, "method", "")), str(getattr(options, "url", "")))


@functools.lru_cache(maxsize=1024)
def _endpoint_kind(method: str, url: str) -> str | None:
    if method.lower() != "post":
        return None
    path = url.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return CHAT
    if path.endswith("/completions"):
        return COMPLETIONS
    if path.endswith("/responses"):
        return RESPONSES
    return None


_endpoint_urls: dict[tuple[int, str], tuple[Any, str]] = {}


def endpoint_url(client: Any, options: Any) -> str:
    url = str(options.url)
    if "://" in url:
        return url
    base = client.base_url
    # Formatting an httpx URL costs microseconds on every call; its id is safe as a key while it is kept alive.
    cached = _endpoint_urls.get((id(base), url))
    if cached is not None and cached[0] is base:
        return cached[1]
    full = str(base).rstrip("/") + "/" + url.lstrip("/")
    if len(_endpoint_urls) > 1024:
        _endpoint_urls.clear()
    _endpoint_urls[(id(base), url)] = (base, full)
    return full


def _prepare_options(options: Any, body: Mapping[str, Any] | None, kind: str, wants_ids: bool) -> None:
    """Add the token-id params and the propagation headers to openai's request options for this call.

    The options object is openai's own, built for this one call, and openai copies it before every attempt; the
    dicts inside it may be the caller's (`extra_headers`, `extra_body`), so those are replaced, never mutated.
    (Copying the options object instead cost ~5-20 µs a call.)
    """
    if wants_ids and body is not None:
        params = missing_token_id_params(kind, body, options.extra_json)
        if params:
            options.extra_json = {**(options.extra_json or {}), **params}
    carrier: dict[str, str] = {}
    inject_current(carrier)
    if carrier:
        headers = options.headers if isinstance(options.headers, Mapping) else {}
        added = {key: value for key, value in carrier.items() if key not in headers}
        if added:
            options.headers = {**headers, **added}


def _recorder(call: LLMCall, kind: str, streaming: bool) -> Callable[[Any], None]:
    """Where a response or chunk goes: `LLMCall` keeps it and reads it on the span finisher's thread."""
    if kind == RESPONSES:
        return call.record_response_event if streaming else call.record_response
    return call.record_chunk if streaming else call.record_completion


def _is_stream(result: Any) -> bool:
    return hasattr(result, "_iterator") and hasattr(result, "response") and hasattr(result, "close")


def _observe_sync_stream(stream: Any, call: LLMCall, kind: str, owner: bool) -> Any:
    record = _recorder(call, kind, streaming=True)
    inner = stream._iterator

    def observed() -> Any:
        complete = False
        error: BaseException | None = None
        try:
            for item in inner:
                record(item)
                yield item
            complete = True
        except Exception as exc:
            error = exc
            raise
        finally:
            if owner:
                call.finish(error=error, stream_complete=complete)

    generator = observed()
    stream._iterator = generator
    original_close = stream.close

    def close() -> None:
        try:
            original_close()
        finally:
            generator.close()
            if owner:
                call.finish(stream_complete=False)

    stream.close = close
    if owner:  # a stream dropped before it was ever iterated still ends its span
        weakref.finalize(stream, call.finish, stream_complete=False)
    return stream


def _observe_async_stream(stream: Any, call: LLMCall, kind: str, owner: bool) -> Any:
    record = _recorder(call, kind, streaming=True)
    inner = stream._iterator

    async def observed() -> Any:
        complete = False
        error: BaseException | None = None
        try:
            async for item in inner:
                record(item)
                yield item
            complete = True
        except Exception as exc:
            error = exc
            raise
        finally:
            if owner:
                call.finish(error=error, stream_complete=complete)

    generator = observed()
    stream._iterator = generator
    original_close = stream.close

    async def close() -> None:
        try:
            await original_close()
        finally:
            await generator.aclose()
            if owner:
                call.finish(stream_complete=False)

    stream.close = close
    if owner:
        weakref.finalize(stream, call.finish, stream_complete=False)
    return stream


def _observe_value(result: Any, call: LLMCall, kind: str, owner: bool) -> Any:
    """Record a parsed, non-raw result (model, dict or httpx response) and end the span if we own it."""
    if isinstance(result, ParsedModel):  # the common case, told apart cheaply (no failing attribute probes)
        _recorder(call, kind, streaming=False)(result)
        if owner:
            call.finish()
        return result
    if _is_stream(result):
        if inspect.isasyncgen(result._iterator):
            return _observe_async_stream(result, call, kind, owner)
        return _observe_sync_stream(result, call, kind, owner)
    payload = result
    if hasattr(result, "http_version") and hasattr(result, "is_stream_consumed"):  # httpx(2).Response
        payload = _json_body(result)
    if payload is not None:
        _recorder(call, kind, streaming=False)(payload)
    if owner:
        call.finish()
    return result


def _json_body(response: Any) -> Any:
    if not getattr(response, "is_stream_consumed", False) and not hasattr(response, "_content"):
        return None  # a streamed body the caller has not read: reading it here would consume it
    try:
        return response.json()
    except Exception:
        return None


def _is_raw_response(result: Any) -> bool:
    return hasattr(result, "http_response") and hasattr(result, "parse")


def make_sync_wrapper(tracer: trace.Tracer) -> Callable[..., Any]:
    def request_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        options = args[1] if len(args) >= 2 else kwargs.get("options")
        kind = classify(options)
        if kind is None:
            return wrapped(*args, **kwargs)
        url = endpoint_url(instance, options)
        wants_ids = settings.wants_token_ids(url)
        body = options.json_data if isinstance(options.json_data, Mapping) else None
        outer = active_llm_call()
        if outer is not None:  # LiteLLM (or another layer) owns the span; feed it what the server returns
            outer.fed_by_inner = True
            _prepare_options(options, body, kind, wants_ids)
            return _observe_sync_result(wrapped(*args, **kwargs), outer, kind, owner=False)
        call = LLMCall(tracer, operation=_OPERATION[kind], body=body, url=url, token_ids_requested=wants_ids)
        token = context.attach(call.context())
        try:
            _prepare_options(options, body, kind, wants_ids)
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            call.finish(error=exc)
            raise
        finally:
            context.detach(token)
        return _observe_sync_result(result, call, kind, owner=True)

    return request_wrapper


def _observe_sync_result(result: Any, call: LLMCall, kind: str, owner: bool) -> Any:
    if not isinstance(result, ParsedModel) and _is_raw_response(result):
        try:
            parsed = result.parse()
        except Exception as exc:
            if owner:
                call.finish(error=exc)
            return result
        if inspect.isawaitable(parsed):  # pragma: no cover - sync client never returns async responses
            parsed.close()
            return result
        _observe_value(parsed, call, kind, owner)
        return result
    return _observe_value(result, call, kind, owner)


def make_async_wrapper(tracer: trace.Tracer) -> Callable[..., Any]:
    async def request_wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple, kwargs: dict) -> Any:
        options = args[1] if len(args) >= 2 else kwargs.get("options")
        kind = classify(options)
        if kind is None:
            return await wrapped(*args, **kwargs)
        url = endpoint_url(instance, options)
        wants_ids = settings.wants_token_ids(url)
        body = options.json_data if isinstance(options.json_data, Mapping) else None
        outer = active_llm_call()
        if outer is not None:
            outer.fed_by_inner = True
            _prepare_options(options, body, kind, wants_ids)
            return await _observe_async_result(await wrapped(*args, **kwargs), outer, kind, owner=False)
        call = LLMCall(tracer, operation=_OPERATION[kind], body=body, url=url, token_ids_requested=wants_ids)
        token = context.attach(call.context())
        try:
            _prepare_options(options, body, kind, wants_ids)
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            call.finish(error=exc)
            raise
        finally:
            context.detach(token)
        return await _observe_async_result(result, call, kind, owner=True)

    return request_wrapper


async def _observe_async_result(result: Any, call: LLMCall, kind: str, owner: bool) -> Any:
    if not isinstance(result, ParsedModel) and _is_raw_response(result):
        try:
            parsed = result.parse()
            if inspect.isawaitable(parsed):
                parsed = await parsed
        except Exception as exc:
            if owner:
                call.finish(error=exc)
            return result
        _observe_value(parsed, call, kind, owner)
        return result
    return _observe_value(result, call, kind, owner)
