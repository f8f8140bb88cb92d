"""One LLM call, one span: the shared core of the OpenAI and LiteLLM instrumentors.

An `LLMCall` opens a `chat {model}` / `text_completion {model}` CLIENT span with the request attributes, is fed
either a whole response or stream chunks (dicts or the openai/litellm model objects alike), and ends the span
with the response attributes, the token ids and logprobs read from the server (vLLM format), and the
`agl.llm.token_ids_complete` verdict.

The caller's thread does only what must happen there: read the request, resolve the agent name, fix the span's
identity (`DeferredSpan`), take the start and end times, and keep references to what the server returned. Reading
those responses, building the SDK span and setting its attributes run on the span finisher's thread.

While a call is open its object sits in the OpenTelemetry context: a nested layer (LiteLLM going through the
OpenAI client) finds it with `active_llm_call()` and contributes what it sees instead of opening a second span.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context, trace
from opentelemetry.trace import SpanKind

from lightning_otel import semconv
from lightning_otel.capture import message_content
from lightning_otel.capture.agent_naming import resolve_agent_name
from lightning_otel.capture.deferred_span import DeferredSpan
from lightning_otel.capture.framework_context import framework_parent_context
from lightning_otel.capture.response_readers import (
    Choice,
    accumulate_delta,
    field,
    logprobs_of,
    read_message,
    read_message_event,
    read_response,
)
from lightning_otel.capture.rollout_context import raise_if_stopped
from lightning_otel.capture.settings import settings
from lightning_otel.capture.span_finisher import finisher

logger = logging.getLogger(__name__)

_ACTIVE_CALL_KEY = context.create_key("agl-active-llm-call")
_TERMINAL_RESPONSE_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})

# request body key -> span attribute (GenAI conventions)
_REQUEST_PARAMS: tuple[tuple[str, str], ...] = (
    ("temperature", semconv.GEN_AI_REQUEST_TEMPERATURE),
    ("top_p", semconv.GEN_AI_REQUEST_TOP_P),
    ("top_k", semconv.GEN_AI_REQUEST_TOP_K),
    ("max_tokens", semconv.GEN_AI_REQUEST_MAX_TOKENS),
    ("max_completion_tokens", semconv.GEN_AI_REQUEST_MAX_TOKENS),
    ("max_output_tokens", semconv.GEN_AI_REQUEST_MAX_TOKENS),
    ("frequency_penalty", semconv.GEN_AI_REQUEST_FREQUENCY_PENALTY),
    ("presence_penalty", semconv.GEN_AI_REQUEST_PRESENCE_PENALTY),
    ("seed", semconv.GEN_AI_REQUEST_SEED),
    ("n", semconv.GEN_AI_REQUEST_CHOICE_COUNT),
)


@functools.lru_cache(maxsize=256)
def server_of(url: str) -> tuple[str | None, int | None]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80 if parts.scheme == "http" else None)
    return parts.hostname, port


def active_llm_call(ctx: context.Context | None = None) -> LLMCall | None:
    """The LLM call open in `ctx` (default: current), if a layer above already owns the span."""
    return context.get_value(_ACTIVE_CALL_KEY, ctx)  # type: ignore[return-value]


def request_attributes(body: Mapping[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for key, attribute in _REQUEST_PARAMS:
        value = body.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[attribute] = value
    stop = body.get("stop")
    if isinstance(stop, str):
        attributes[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] = (stop,)
    elif isinstance(stop, (list, tuple)) and all(isinstance(s, str) for s in stop):
        attributes[semconv.GEN_AI_REQUEST_STOP_SEQUENCES] = tuple(stop)
    tools = body.get("tools") or body.get("functions")
    if isinstance(tools, (list, tuple)) and tools:  # read by the runner's no-progress rule (calls without a tool call)
        attributes[semconv.AGL_TOOLS_OFFERED] = len(tools)
    return attributes


class LLMCall:
    """The span of one request to a model, and what was read back from the server."""

    def __init__(
        self,
        tracer: trace.Tracer,
        *,
        operation: str,
        body: Mapping[str, Any] | None,
        url: str | None,
        provider: str = "openai",
        token_ids_requested: bool = False,
        request_model: str | None = None,
    ) -> None:
        raise_if_stopped()  # an attempt the runner stopped makes no more calls
        start_time = time.time_ns()
        body = body if body is not None else {}
        model = request_model if request_model is not None else body.get("model")
        self.operation = operation
        self.token_ids_requested = token_ids_requested
        self.choice_count_requested = body.get("n") if isinstance(body.get("n"), int) else 1
        self.provider = provider
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.prompt_token_ids: list[int] | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.response_status: str | None = None
        self.choices: dict[int, Choice] = {}
        self.ended = False
        # (reader, whole response) kept by reference and read on the span finisher's thread when the call ends.
        self._received: list[tuple[Callable[[LLMCall, Any], None], Any]] = []
        # Set when a nested layer (the OpenAI client under LiteLLM) reads the raw server response for us.
        self.fed_by_inner = False
        # Set by whoever learns more about the call before it ends (the policy gateway: the weights' version).
        self.extra_attributes: dict[str, Any] = {}
        attributes: dict[str, Any] = {
            semconv.GEN_AI_OPERATION_NAME: operation,
            semconv.GEN_AI_PROVIDER_NAME: provider,
        }
        if model:
            attributes[semconv.GEN_AI_REQUEST_MODEL] = str(model)
        if url:
            host, port = server_of(url)
            if host:
                attributes[semconv.SERVER_ADDRESS] = host
            if port:
                attributes[semconv.SERVER_PORT] = port
        attributes.update(request_attributes(body))
        parent = framework_parent_context()  # None unless a framework (OpenAI Agents SDK) has its own span stack
        agent_name = resolve_agent_name(parent)
        if agent_name:
            attributes[semconv.GEN_AI_AGENT_NAME] = agent_name
        content = settings.content
        self.capture_content = content.enabled
        self._content_on_span = content.on_span
        self._content_as_event = content.as_event
        self._input_messages: str | None = None
        self._tool_definitions: str | None = None  # recorded with the messages: what a template rendered them with
        if self.capture_content:
            self._input_messages = message_content.to_json(message_content.input_messages(body))
            definitions = message_content.tool_definitions(body)
            if definitions:
                self._tool_definitions = message_content.to_json(definitions)
            if self._content_on_span:
                attributes[semconv.GEN_AI_INPUT_MESSAGES] = self._input_messages
                if self._tool_definitions:
                    attributes[semconv.GEN_AI_TOOL_DEFINITIONS] = self._tool_definitions
        self._span = DeferredSpan.start(
            tracer,
            semconv.llm_span_name(operation, str(model) if model else None),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            parent=parent,
            start_time=start_time,
        )
        self.span = self._span.in_flight  # the span's identity, for context and propagation while in flight

    # --- context ---------------------------------------------------------------------------------------------
    def context(self) -> context.Context:
        """The current context with this call's span as parent and this call marked active."""
        return context.set_value(_ACTIVE_CALL_KEY, self, trace.set_span_in_context(self.span))

    # --- receiving responses (caller's thread) ---------------------------------------------------------------
    def record_completion(self, response: Any) -> None:
        """A whole chat or text completion (non-streaming): kept, and read on the span finisher's thread."""
        self._received.append((LLMCall._read_completion, response))

    def record_chunk(self, chunk: Any) -> None:
        """One streamed chat/text completion chunk, read now: held until the stream ends, hundreds of chunk
        objects would outlive the garbage collector's young generations and trigger full collections."""
        try:
            self._read_chunk(chunk)
        except Exception:  # a chunk shape we do not know must never break the agent's stream
            logger.debug("lightning-otel: could not read an LLM stream chunk", exc_info=True)

    def record_response(self, response: Any) -> None:
        """A Responses API object: kept, and read on the span finisher's thread."""
        self._received.append((read_response, response))

    def record_response_event(self, event: Any) -> None:
        """A streamed Responses API event: the terminal one carries the whole response."""
        try:
            terminal = field(event, "type") in _TERMINAL_RESPONSE_EVENTS
        except Exception:  # an event shape we do not know must never break the agent's stream
            terminal = False
        if terminal and field(event, "response") is not None:
            self.record_response(field(event, "response"))

    def record_message(self, message: Any) -> None:
        """An Anthropic Message (non-streaming): kept, and read on the span finisher's thread."""
        self._received.append((read_message, message))

    def record_message_event(self, event: Any) -> None:
        """One streamed Anthropic event, read now (like a chat chunk)."""
        try:
            read_message_event(self, event)
        except Exception:  # an event shape we do not know must never break the agent's stream
            logger.debug("lightning-otel: could not read an Anthropic stream event", exc_info=True)

    # --- reading responses (whole responses on the span finisher's thread, chunks as they come) -------------
    def choice_at(self, index: Any) -> Choice:
        index = index if isinstance(index, int) else 0
        choice = self.choices.get(index)
        if choice is None:
            choice = self.choices[index] = Choice()
        return choice

    def read_usage(self, usage: Any) -> None:
        if usage is None:
            return
        prompt_tokens = field(usage, "prompt_tokens")
        if prompt_tokens is None:
            prompt_tokens = field(usage, "input_tokens")
        completion_tokens = field(usage, "completion_tokens")
        if completion_tokens is None:
            completion_tokens = field(usage, "output_tokens")
        if isinstance(prompt_tokens, int):
            self.input_tokens = prompt_tokens
        if isinstance(completion_tokens, int):
            self.output_tokens = completion_tokens

    def read_header(self, payload: Any) -> None:
        if self.response_id is None:
            response_id = field(payload, "id")
            if response_id:
                self.response_id = str(response_id)
        if self.response_model is None:
            model = field(payload, "model")
            if model:
                self.response_model = str(model)
        prompt_ids = field(payload, "prompt_token_ids")
        if prompt_ids is not None and self.prompt_token_ids is None:
            self.prompt_token_ids = list(prompt_ids)
        version = field(payload, semconv.POLICY_VERSION_FIELD)  # our replicas: which weights sampled this
        if isinstance(version, int):
            self.extra_attributes[semconv.AGL_POLICY_VERSION] = version
        policy = field(payload, semconv.POLICY_FIELD)  # a policy per agent: which policy sampled this
        if isinstance(policy, str) and policy:
            self.extra_attributes[semconv.AGL_LLM_POLICY] = policy

    def _read_completion(self, response: Any) -> None:
        self.read_header(response)
        for raw in field(response, "choices") or ():
            choice = self.choice_at(field(raw, "index"))
            token_ids = field(raw, "token_ids")
            if token_ids is None:  # LiteLLM's hosted_vllm provider keeps them here
                token_ids = (field(raw, "provider_specific_fields") or {}).get("token_ids")
            if token_ids is not None:
                choice.token_ids = list(token_ids)
            if self.prompt_token_ids is None:
                prompt_ids = field(raw, "prompt_token_ids")  # /completions reports them per choice
                if prompt_ids is not None:
                    self.prompt_token_ids = list(prompt_ids)
            choice.logprobs = logprobs_of(field(raw, "logprobs"))
            finish_reason = field(raw, "finish_reason")
            choice.finish_reason = str(finish_reason) if finish_reason is not None else None
            if self.capture_content:
                message = field(raw, "message")
                if message is not None:
                    text = field(message, "content")
                    choice.text = [text] if text else []
                    choice.tool_calls = dict(enumerate(field(message, "tool_calls") or ()))
                elif field(raw, "text") is not None:
                    choice.text = [str(field(raw, "text"))]
        self.read_usage(field(response, "usage"))

    def _read_chunk(self, chunk: Any) -> None:
        """Per-chunk `token_ids` are deltas; prompt ids come with the first chunk."""
        self.read_header(chunk)
        for raw in field(chunk, "choices") or ():
            choice = self.choice_at(field(raw, "index"))
            token_ids = field(raw, "token_ids")
            if token_ids:
                if choice.token_ids is None:
                    choice.token_ids = []
                choice.token_ids.extend(token_ids)
            logprobs = logprobs_of(field(raw, "logprobs"))
            if logprobs:
                if choice.logprobs is None:
                    choice.logprobs = []
                choice.logprobs.extend(logprobs)
            finish_reason = field(raw, "finish_reason")
            if finish_reason is not None:
                choice.finish_reason = str(finish_reason)
            if self.capture_content:
                accumulate_delta(choice, raw)
        self.read_usage(field(chunk, "usage"))

    # --- ending ----------------------------------------------------------------------------------------------
    def _token_ids_complete(self, stream_complete: bool, error: BaseException | None) -> bool:
        if not stream_complete or error is not None or self.prompt_token_ids is None or not self.choices:
            return False
        if len(self.choices) < self.choice_count_requested:
            return False
        if any(c.token_ids is None or c.finish_reason is None for c in self.choices.values()):
            return False
        if self.input_tokens is not None and self.input_tokens != len(self.prompt_token_ids):
            return False
        # Tool or reasoning parsers can drop tokens: the server's own count is the reference.
        produced = sum(len(c.token_ids or ()) for c in self.choices.values())
        return self.output_tokens is None or self.output_tokens == produced

    def finish(self, *, error: BaseException | None = None, stream_complete: bool = True) -> None:
        """End the span once; `stream_complete=False` when the caller stopped reading a stream early.

        The end time is taken here; reading the responses, building the span and ending it happen on the span
        finisher's thread.
        """
        if self.ended:
            return
        self.ended = True
        end_time = time.time_ns()
        finisher.submit(lambda: self._end(end_time, error, stream_complete))

    def _end(self, end_time: int, error: BaseException | None, stream_complete: bool) -> None:
        for reader, item in self._received:
            try:
                reader(self, item)
            except Exception:  # a response shape we do not know must never cost the span
                logger.debug("lightning-otel: could not read an LLM response", exc_info=True)
        self._received = []
        attributes: dict[str, Any] = dict(self.extra_attributes)
        arrays: dict[str, list[Any]] = {}  # token ids and logprobs: set without per-element validation
        if self.response_id:
            attributes[semconv.GEN_AI_RESPONSE_ID] = self.response_id
        if self.response_model:
            attributes[semconv.GEN_AI_RESPONSE_MODEL] = self.response_model
        if self.input_tokens is not None:
            attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] = self.input_tokens
        if self.output_tokens is not None:
            attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = self.output_tokens
        ordered = [self.choices[i] for i in sorted(self.choices)]
        finish_reasons = [c.finish_reason for c in ordered if c.finish_reason is not None]
        if finish_reasons:
            attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = finish_reasons
        has_ids = self.prompt_token_ids is not None or any(c.token_ids is not None for c in ordered)
        if has_ids:
            self.provider = "vllm" if self.provider == "openai" else self.provider
            attributes[semconv.GEN_AI_PROVIDER_NAME] = self.provider
        if self.prompt_token_ids is not None:
            arrays[semconv.AGL_PROMPT_TOKEN_IDS] = self.prompt_token_ids
        for position, choice in enumerate(ordered):
            if position == 0:
                ids_key, logprobs_key = semconv.AGL_RESPONSE_TOKEN_IDS, semconv.AGL_RESPONSE_LOGPROBS
            else:
                ids_key = semconv.AGL_CHOICE_RESPONSE_TOKEN_IDS.format(index=position)
                logprobs_key = semconv.AGL_CHOICE_RESPONSE_LOGPROBS.format(index=position)
            if choice.token_ids is not None:
                arrays[ids_key] = choice.token_ids
            if choice.logprobs:
                arrays[logprobs_key] = choice.logprobs
        if len(ordered) > 1:
            attributes[semconv.AGL_CHOICE_COUNT] = len(ordered)
        if has_ids or self.token_ids_requested:
            attributes[semconv.AGL_TOKEN_IDS_COMPLETE] = self._token_ids_complete(stream_complete, error)
        event = None
        if self.capture_content and ordered:
            output = message_content.to_json(
                [
                    message_content.output_message(
                        "assistant",
                        "".join(c.text) or None,
                        [c.tool_calls[k] for k in sorted(c.tool_calls)],
                        c.finish_reason,
                    )
                    for c in ordered
                ]
            )
            if self._content_on_span:
                attributes[semconv.GEN_AI_OUTPUT_MESSAGES] = output
            if self._content_as_event:
                details = {
                    semconv.GEN_AI_INPUT_MESSAGES: self._input_messages or "[]",
                    semconv.GEN_AI_OUTPUT_MESSAGES: output,
                }
                if self._tool_definitions:
                    details[semconv.GEN_AI_TOOL_DEFINITIONS] = self._tool_definitions
                event = (semconv.GEN_AI_CONTENT_EVENT, details, end_time)
        if error is not None:
            attributes[semconv.ERROR_TYPE] = type(error).__qualname__
        self._span.end(attributes, arrays, end_time=end_time, error=error, event=event)
