"""Wrappers for `SyncAPIClient.request` / `AsyncAPIClient.request` of the SDKs Stainless generates: openai 2.x and
3.x, and anthropic (the same client internals; `sdk="anthropic"`, its `messages.create` / `.stream`).

That single point sees `chat.completions.create` (and `.parse()`, `.with_raw_response`,
`.with_streaming_response`, `stream=True`), `completions.create`, `responses.create` and bare `client.post`.
Four return shapes come back: a model object, a `LegacyAPIResponse`, a `Stream`/`AsyncStream`, an `APIResponse`;
raw responses of LLM calls are parsed here (parses are cached, the caller gets the same object).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import sys
import weakref
from collections.abc import Callable, Collection, Mapping
from types import ModuleType
from typing import Any

import wrapt
from opentelemetry import context, trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from lightning_otel import semconv
from lightning_otel.capture.llm_call import LLMCall, active_llm_call
from lightning_otel.capture.propagation import inject_caller
from lightning_otel.capture.settings import settings
from lightning_otel.capture.setup import instrumentor_tracer
from lightning_otel.capture.tested_versions import is_tested
from lightning_otel.capture.token_id_params import CHAT, COMPLETIONS, MESSAGES, RESPONSES, missing_token_id_params
from lightning_otel.instrumentors.import_hooks import when_imported
from lightning_otel.instrumentors.patches import Patches

logger = logging.getLogger(__name__)

try:  # openai's parsed responses are pydantic models (a failing hasattr on one costs microseconds)
    from pydantic import BaseModel as ParsedModel
except ImportError:  # pragma: no cover - openai depends on pydantic
    ParsedModel = ()  # type: ignore[assignment,misc]

# Per SDK: request options updated in place where its release is known to build them anew for each call.
_OPTIONS_IN_PLACE = {"openai": is_tested("openai"), "anthropic": is_tested("anthropic")}
_OPERATION = {CHAT: semconv.OP_CHAT, COMPLETIONS: semconv.OP_TEXT_COMPLETION, RESPONSES: semconv.OP_CHAT,
              MESSAGES: semconv.OP_CHAT}  # fmt: skip


def classify(options: Any) -> str | None:
    """Which LLM endpoint a request targets (None: not an LLM call, e.g. models.list or embeddings)."""
    return _endpoint_kind(str(getattr(options, "method", "")), str(getattr(options, "url", "")))


@functools.lru_cache(maxsize=1024)
def _endpoint_kind(method: str, url: str) -> str | None:
    if method.lower() != "post":
        return None
    path = url.split("?", 1)[0].rstrip("/")
    if path.endswith("/messages"):  # Anthropic's (its count_tokens is no model call)
        return MESSAGES
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


def _prepare_options(
    options: Any, body: Mapping[str, Any] | None, kind: str, wants_ids: bool, sdk: str = "openai"
) -> Any:
    """The request options for this call, with the token-id params and the propagation headers added.

    On tested openai releases the options object is openai's own, built for this one call (openai copies it before
    every attempt), and is updated in place; the dicts inside it may be the caller's (`extra_headers`,
    `extra_body`), so those are replaced, never mutated. (Copying the options object cost ~5-20 µs a call.) On any
    other release a copy (pydantic's `model_copy`) is updated and sent instead.
    """
    if not _OPTIONS_IN_PLACE.get(sdk, False):
        options = options.model_copy()
    if wants_ids and body is not None:
        params = missing_token_id_params(kind, body, options.extra_json)
        if params:
            options.extra_json = {**(options.extra_json or {}), **params}
    carrier: dict[str, str] = {}
    inject_caller(carrier)
    if carrier:
        headers = options.headers if isinstance(options.headers, Mapping) else {}
        added = {key: value for key, value in carrier.items() if key not in headers}
        if added:
            options.headers = {**headers, **added}
    return options


def _with_options(args: tuple, kwargs: dict, options: Any) -> tuple[tuple, dict]:
    """`request(cast_to, options, ...)`'s arguments with `options` in place of the original (a copy on untested
    openai releases; on tested ones it is the same object and nothing is rebuilt)."""
    if (args[1] if len(args) >= 2 else kwargs.get("options")) is options:
        return args, kwargs
    if len(args) >= 2:
        return (args[0], options, *args[2:]), kwargs
    return args, {**kwargs, "options": options}


def _recorder(call: LLMCall, kind: str, streaming: bool) -> Callable[[Any], None]:
    """Where a response or chunk goes: `LLMCall` keeps it and reads it on the span finisher's thread."""
    if kind == RESPONSES:
        return call.record_response_event if streaming else call.record_response
    if kind == MESSAGES:
        return call.record_message_event if streaming else call.record_message
    return call.record_chunk if streaming else call.record_completion


def _stream_types() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(sync, async) stream classes of the SDKs imported in this process (a wrapped client's SDK is)."""
    sdks = [module for name in ("openai", "anthropic") if (module := sys.modules.get(name)) is not None]
    return (tuple(sdk.Stream for sdk in sdks if hasattr(sdk, "Stream")),
            tuple(sdk.AsyncStream for sdk in sdks if hasattr(sdk, "AsyncStream")))  # fmt: skip


class _TracedStream(wrapt.ObjectProxy):  # type: ignore[misc]
    """openai's `Stream` seen through our proxy (openai's object is not changed): each item is recorded as it
    passes, and the span ends when the stream is exhausted, fails, is closed, or is dropped unread."""

    def __init__(self, stream: Any, call: LLMCall, kind: str, owner: bool) -> None:
        super().__init__(stream)
        self._self_call = call
        self._self_owner = owner
        self._self_items = self._self_observe(iter(stream), _recorder(call, kind, streaming=True))
        if owner:
            weakref.finalize(self, call.finish, stream_complete=False)

    def _self_observe(self, inner: Any, record: Callable[[Any], None]) -> Any:
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
            if self._self_owner:
                self._self_call.finish(error=error, stream_complete=complete)

    def __iter__(self) -> Any:
        return self._self_items

    def __next__(self) -> Any:
        return next(self._self_items)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.__wrapped__.close()
        finally:
            self._self_items.close()
            if self._self_owner:
                self._self_call.finish(stream_complete=False)


class _TracedAsyncStream(wrapt.ObjectProxy):  # type: ignore[misc]
    """`_TracedStream` for openai's `AsyncStream`."""

    def __init__(self, stream: Any, call: LLMCall, kind: str, owner: bool) -> None:
        super().__init__(stream)
        self._self_call = call
        self._self_owner = owner
        self._self_items = self._self_observe(stream.__aiter__(), _recorder(call, kind, streaming=True))
        if owner:
            weakref.finalize(self, call.finish, stream_complete=False)

    async def _self_observe(self, inner: Any, record: Callable[[Any], None]) -> Any:
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
            if self._self_owner:
                self._self_call.finish(error=error, stream_complete=complete)

    def __aiter__(self) -> Any:
        return self._self_items

    async def __anext__(self) -> Any:
        return await self._self_items.__anext__()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        try:
            await self.__wrapped__.close()
        finally:
            await self._self_items.aclose()
            if self._self_owner:
                self._self_call.finish(stream_complete=False)


class _TracedRawResponse(wrapt.ObjectProxy):  # type: ignore[misc]
    """A raw response (`with_raw_response` / `with_streaming_response`) whose `parse()` hands out our traced stream
    in place of the stream openai parsed and cached."""

    def __init__(self, response: Any, inner: Any, traced: Any) -> None:
        super().__init__(response)
        self._self_inner = inner
        self._self_traced = traced

    def parse(self, *args: Any, **kwargs: Any) -> Any:
        parsed = self.__wrapped__.parse(*args, **kwargs)
        if inspect.isawaitable(parsed):
            return self._self_swap_async(parsed)
        return self._self_traced if parsed is self._self_inner else parsed

    async def _self_swap_async(self, parsed: Any) -> Any:
        value = await parsed
        return self._self_traced if value is self._self_inner else value


def _observe_value(result: Any, call: LLMCall, kind: str, owner: bool) -> Any:
    """Record a parsed, non-raw result (model, dict or httpx response) and end the span if we own it."""
    if isinstance(result, ParsedModel):  # the common case, told apart cheaply (no failing attribute probes)
        _recorder(call, kind, streaming=False)(result)
        if owner:
            call.finish()
        return result
    sync_streams, async_streams = _stream_types()
    if isinstance(result, async_streams):
        return _TracedAsyncStream(result, call, kind, owner)
    if isinstance(result, sync_streams):
        return _TracedStream(result, call, kind, owner)
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


def make_sync_wrapper(tracer: trace.Tracer, sdk: str = "openai") -> Callable[..., Any]:
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
            args, kwargs = _with_options(args, kwargs, _prepare_options(options, body, kind, wants_ids, sdk))
            return _observe_sync_result(wrapped(*args, **kwargs), outer, kind, owner=False)
        call = LLMCall(tracer, operation=_OPERATION[kind], body=body, url=url, token_ids_requested=wants_ids,
                       provider=sdk)  # fmt: skip
        token = context.attach(call.context())
        try:
            args, kwargs = _with_options(args, kwargs, _prepare_options(options, body, kind, wants_ids, sdk))
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
            return _observe_unparsed(result, call, kind, owner, exc)
        if inspect.isawaitable(parsed):  # pragma: no cover - sync client never returns async responses
            parsed.close()
            return result
        return _with_traced_parse(result, parsed, _observe_value(parsed, call, kind, owner))
    return _observe_value(result, call, kind, owner)


def _observe_unparsed(raw: Any, call: LLMCall, kind: str, owner: bool, error: Exception) -> Any:
    """Our parse of a raw response failed: record the body's JSON instead, the caller's own parse being its own
    business. Pydantic builds openai's models on first use, and threads building one at once can fail (seen on the
    first calls of concurrent rollouts under load: the call succeeded, its span had no token ids and an error)."""
    payload = _json_body(raw.http_response)
    if payload is None:  # a body we cannot read either (a stream not consumed, not JSON): the span says why
        if owner:
            call.finish(error=error)
        return raw
    logger.debug("lightning-otel: parsing a raw response failed (%r); its JSON body was recorded", error)
    _recorder(call, kind, streaming=False)(payload)
    if owner:
        call.finish()
    return raw


def _with_traced_parse(raw: Any, parsed: Any, observed: Any) -> Any:
    """The raw response to return: proxied when its parsed value is a stream we now trace through a proxy."""
    return raw if observed is parsed else _TracedRawResponse(raw, parsed, observed)


def make_async_wrapper(tracer: trace.Tracer, sdk: str = "openai") -> Callable[..., Any]:
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
            args, kwargs = _with_options(args, kwargs, _prepare_options(options, body, kind, wants_ids, sdk))
            return await _observe_async_result(await wrapped(*args, **kwargs), outer, kind, owner=False)
        call = LLMCall(tracer, operation=_OPERATION[kind], body=body, url=url, token_ids_requested=wants_ids,
                       provider=sdk)  # fmt: skip
        token = context.attach(call.context())
        try:
            args, kwargs = _with_options(args, kwargs, _prepare_options(options, body, kind, wants_ids, sdk))
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
            return _observe_unparsed(result, call, kind, owner, exc)
        return _with_traced_parse(result, parsed, _observe_value(parsed, call, kind, owner))
    return _observe_value(result, call, kind, owner)


class StainlessClientInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Wraps `SyncAPIClient.request` / `AsyncAPIClient.request` of the SDK named `sdk` when it is imported (the
    OpenAI and Anthropic instrumentors: each subclass names its SDK and the releases it supports)."""

    sdk: str
    instruments: tuple[str, ...]

    def __init__(self) -> None:
        super().__init__()
        self._tracer: trace.Tracer | None = None
        self._patches = Patches()

    def instrumentation_dependencies(self) -> Collection[str]:
        return self.instruments

    def _instrument(self, **kwargs: Any) -> None:
        self._tracer = instrumentor_tracer(kwargs)
        when_imported(self.sdk, self._patch)

    def _patch(self, _sdk: ModuleType) -> None:
        if self._tracer is None:
            return  # uninstrumented before the import happened
        base_client = importlib.import_module(f"{self.sdk}._base_client")
        self._patches.wrap(base_client, "SyncAPIClient.request", make_sync_wrapper(self._tracer, self.sdk))
        self._patches.wrap(base_client, "AsyncAPIClient.request", make_async_wrapper(self._tracer, self.sdk))

    def _uninstrument(self, **kwargs: Any) -> None:
        self._tracer = None
        self._patches.unwrap_all()
