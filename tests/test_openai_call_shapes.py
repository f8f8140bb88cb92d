"""Every OpenAI client call shape yields exactly one LLM span whose token ids equal what the server returned."""

from __future__ import annotations

import gc
import json

import httpx
import openai
import pytest

import lightning_otel
from lightning_otel import semconv
from lightning_otel.testing import Reply, ToolCall
from tests.helpers import attrs

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write a SQL query"}]


@pytest.fixture
def client(openai_test_server):
    return openai.OpenAI(base_url=openai_test_server.base_url, api_key="test", max_retries=0)


@pytest.fixture
def aclient(openai_test_server):
    return openai.AsyncOpenAI(base_url=openai_test_server.base_url, api_key="test", max_retries=0)


def expected_ids(server, messages, reply_text):
    tokenizer = server.tokenizer
    prompt = tokenizer.encode_chat(messages)
    response = [*tokenizer.encode(reply_text), tokenizer.eos_token_id]
    return prompt, response


def check_llm_span(span, server, messages, reply_text, *, agent="writer", rollout=("ro-1", "at-1")):
    prompt, response = expected_ids(server, messages, reply_text)
    a = attrs(span)
    assert span.kind.name == "CLIENT"
    assert span.name == "chat agl-model"
    assert a[semconv.GEN_AI_OPERATION_NAME] == "chat"
    assert a[semconv.GEN_AI_REQUEST_MODEL] == "agl-model"
    assert list(a[semconv.AGL_PROMPT_TOKEN_IDS]) == prompt
    assert list(a[semconv.AGL_RESPONSE_TOKEN_IDS]) == response
    assert a[semconv.AGL_TOKEN_IDS_COMPLETE] is True
    assert a[semconv.GEN_AI_AGENT_NAME] == agent
    assert (a[semconv.AGL_ROLLOUT_ID], a[semconv.AGL_ATTEMPT_ID]) == rollout
    assert a[semconv.SERVER_ADDRESS] == "127.0.0.1"
    assert a[semconv.SERVER_PORT] == server.port
    assert a[semconv.GEN_AI_PROVIDER_NAME] == "vllm"
    return a


def only_llm_span(agl_spans):
    spans = agl_spans.llm_spans()
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def in_rollout():
    class _Scope:
        def __enter__(self):
            self._r = lightning_otel.rollout_context("ro-1", "at-1")
            self._a = lightning_otel.agent("writer")
            self._r.__enter__()
            self._a.__enter__()

        def __exit__(self, *exc):
            self._a.__exit__(*exc)
            self._r.__exit__(*exc)

    return _Scope()


def test_create_records_exact_ids_logprobs_and_response_attributes(client, openai_test_server, agl_spans):
    openai_test_server.set_replies(["SELECT name FROM customers;"])
    with in_rollout():
        result = client.chat.completions.create(model="agl-model", messages=MESSAGES, temperature=0.5, seed=7)
    span = only_llm_span(agl_spans)
    a = check_llm_span(span, openai_test_server, MESSAGES, "SELECT name FROM customers;")
    assert list(a[semconv.AGL_RESPONSE_TOKEN_IDS]) == result.choices[0].model_extra["token_ids"]
    assert list(a[semconv.AGL_RESPONSE_LOGPROBS]) == [c.logprob for c in result.choices[0].logprobs.content]
    assert a[semconv.GEN_AI_RESPONSE_ID] == result.id
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert a[semconv.GEN_AI_USAGE_INPUT_TOKENS] == result.usage.prompt_tokens
    assert a[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] == result.usage.completion_tokens
    assert a[semconv.GEN_AI_REQUEST_TEMPERATURE] == 0.5
    assert a[semconv.GEN_AI_REQUEST_SEED] == 7
    assert semconv.GEN_AI_INPUT_MESSAGES not in a  # content is opt-in
    body = openai_test_server.requests[-1].body
    assert body["return_token_ids"] is True and body["logprobs"] is True and body["top_logprobs"] == 0


def test_caller_values_are_respected_and_the_callers_options_are_not_mutated(client, openai_test_server, agl_spans):
    extra = {"top_logprobs": 2}
    client.chat.completions.create(model="agl-model", messages=MESSAGES, extra_body=extra)
    assert extra == {"top_logprobs": 2}
    assert openai_test_server.requests[-1].body["top_logprobs"] == 2


@pytest.mark.parametrize("in_place", [True, False], ids=["tested-openai", "untested-openai"])
def test_request_options_are_updated_in_place_only_on_tested_openai_releases(
    in_place, monkeypatch, client, openai_test_server, agl_spans
):
    """On an openai release we did not test, a copy of the request options carries the token-id parameters and
    the propagation headers: the call records the same span either way."""
    from lightning_otel.instrumentors import stainless_wrappers

    monkeypatch.setitem(stainless_wrappers._OPTIONS_IN_PLACE, "openai", in_place)
    seen = []
    original = stainless_wrappers._prepare_options
    monkeypatch.setattr(
        stainless_wrappers, "_prepare_options", lambda o, *a: seen.append((o, original(o, *a))) or seen[-1][1]
    )
    openai_test_server.set_replies(["SELECT 1;"])
    with in_rollout():
        client.chat.completions.create(model="agl-model", messages=MESSAGES)
    ((before, sent),) = seen
    assert (before is sent) == in_place
    if not in_place:
        assert "traceparent" not in (before.headers or {}) and before.extra_json is None  # openai's own untouched
    check_llm_span(only_llm_span(agl_spans), openai_test_server, MESSAGES, "SELECT 1;")
    assert openai_test_server.requests[-1].body["return_token_ids"] is True
    assert "traceparent" in openai_test_server.requests[-1].headers


def test_with_raw_response(client, openai_test_server, agl_spans):
    with in_rollout():
        raw = client.chat.completions.with_raw_response.create(model="agl-model", messages=MESSAGES)
    parsed = raw.parse()
    check_llm_span(only_llm_span(agl_spans), openai_test_server, MESSAGES, parsed.choices[0].message.content)
    assert raw.parse() is parsed


@pytest.fixture
def first_parse_fails(monkeypatch):
    """openai's raw response fails its first parse, as pydantic's lazy model build fails in threads building one
    at once (crewai's concurrent rollouts under load); later parses succeed."""
    from openai._legacy_response import LegacyAPIResponse

    parse, failed = LegacyAPIResponse.parse, []

    def flaky_parse(self, *args, **kwargs):
        if not failed:
            failed.append(True)
            raise AttributeError("type object 'ChatCompletionMessage' has no attribute '__pydantic_core_schema__'")
        return parse(self, *args, **kwargs)

    monkeypatch.setattr(LegacyAPIResponse, "parse", flaky_parse)
    return failed


def test_raw_response_whose_parse_fails_is_recorded_from_its_body(client, openai_test_server, agl_spans,
                                                                  first_parse_fails):  # fmt: skip
    with in_rollout():
        raw = client.chat.completions.with_raw_response.create(model="agl-model", messages=MESSAGES)
    assert first_parse_fails  # our parse failed; the caller's own parse is its business, and works
    parsed = raw.parse()
    span = only_llm_span(agl_spans)
    check_llm_span(span, openai_test_server, MESSAGES, parsed.choices[0].message.content)
    assert span.status.status_code.name != "ERROR"  # the call succeeded


async def test_async_raw_response_whose_parse_fails_is_recorded_from_its_body(aclient, openai_test_server, agl_spans,
                                                                              first_parse_fails):  # fmt: skip
    with in_rollout():
        raw = await aclient.chat.completions.with_raw_response.create(model="agl-model", messages=MESSAGES)
    assert first_parse_fails
    parsed = raw.parse()
    check_llm_span(only_llm_span(agl_spans), openai_test_server, MESSAGES, parsed.choices[0].message.content)


def test_parse_structured_output(client, openai_test_server, agl_spans):
    from pydantic import BaseModel

    class Answer(BaseModel):
        sql: str

    openai_test_server.set_replies(['{"sql": "SELECT 1"}'])
    with in_rollout():
        result = client.chat.completions.parse(model="agl-model", messages=MESSAGES, response_format=Answer)
    assert result.choices[0].message.parsed == Answer(sql="SELECT 1")
    check_llm_span(only_llm_span(agl_spans), openai_test_server, MESSAGES, '{"sql": "SELECT 1"}')


def test_stream_accumulates_delta_ids_and_logprobs(client, openai_test_server, agl_spans):
    openai_test_server.set_replies(["streamed answer here"])
    with in_rollout():
        stream = client.chat.completions.create(model="agl-model", messages=MESSAGES, stream=True)
        chunks = list(stream)
    a = check_llm_span(only_llm_span(agl_spans), openai_test_server, MESSAGES, "streamed answer here")
    streamed = [t for c in chunks for choice in c.choices for t in (choice.model_extra.get("token_ids") or [])]
    assert list(a[semconv.AGL_RESPONSE_TOKEN_IDS]) == streamed
    assert len(a[semconv.AGL_RESPONSE_LOGPROBS]) == len(streamed)
    assert a[semconv.GEN_AI_RESPONSE_ID] == chunks[0].id


def test_stream_early_break_ends_span_with_partial_ids(client, openai_test_server, agl_spans):
    openai_test_server.set_replies(["one two three four five six"])

    def consume_two():
        with in_rollout():
            stream = client.chat.completions.create(model="agl-model", messages=MESSAGES, stream=True)
            for index, _ in enumerate(stream):
                if index == 2:
                    break

    consume_two()
    gc.collect()
    span = only_llm_span(agl_spans)
    a = attrs(span)
    _, full = expected_ids(openai_test_server, MESSAGES, "one two three four five six")
    assert a[semconv.AGL_TOKEN_IDS_COMPLETE] is False
    assert list(a[semconv.AGL_RESPONSE_TOKEN_IDS]) == full[:2]
    assert a[semconv.AGL_ROLLOUT_ID] == "ro-1"


def test_stream_closed_with_context_manager(client, openai_test_server, agl_spans):
    with in_rollout(), client.chat.completions.create(model="agl-model", messages=MESSAGES, stream=True) as s:
        next(iter(s))
    span = only_llm_span(agl_spans)  # ended by close(), not by garbage collection
    assert attrs(span)[semconv.AGL_TOKEN_IDS_COMPLETE] is False


def test_with_streaming_response(client, openai_test_server, agl_spans):
    with (
        in_rollout(),
        client.chat.completions.with_streaming_response.create(model="agl-model", messages=MESSAGES) as response,
    ):
        result = response.parse()
    check_llm_span(only_llm_span(agl_spans), openai_test_server, MESSAGES, result.choices[0].message.content)


def test_with_streaming_response_and_stream(client, openai_test_server, agl_spans):
    openai_test_server.set_replies(["a streamed reply"])
    with (
        in_rollout(),
        client.chat.completions.with_streaming_response.create(
            model="agl-model", messages=MESSAGES, stream=True
        ) as response,
    ):
        for _ in response.parse():
            pass
    check_llm_span(only_llm_span(agl_spans), openai_test_server, MESSAGES, "a streamed reply")


def test_n_greater_than_one_records_every_choice(client, openai_test_server, agl_spans):
    openai_test_server.set_replies(["base"])
    result = client.chat.completions.create(model="agl-model", messages=MESSAGES, n=3)
    a = attrs(only_llm_span(agl_spans))
    assert a[semconv.AGL_CHOICE_COUNT] == 3
    assert list(a[semconv.AGL_RESPONSE_TOKEN_IDS]) == result.choices[0].model_extra["token_ids"]
    for index in (1, 2):
        key = semconv.AGL_CHOICE_RESPONSE_TOKEN_IDS.format(index=index)
        assert list(a[key]) == result.choices[index].model_extra["token_ids"]
        assert a[semconv.AGL_CHOICE_RESPONSE_LOGPROBS.format(index=index)]
    assert a[semconv.AGL_TOKEN_IDS_COMPLETE] is True
    assert a[semconv.GEN_AI_REQUEST_CHOICE_COUNT] == 3


def test_n_greater_than_one_streaming(client, openai_test_server, agl_spans):
    openai_test_server.set_replies(["base"])
    list(client.chat.completions.create(model="agl-model", messages=MESSAGES, n=2, stream=True))
    a = attrs(only_llm_span(agl_spans))
    tokenizer = openai_test_server.tokenizer
    assert list(a[semconv.AGL_CHOICE_RESPONSE_TOKEN_IDS.format(index=1)]) == [
        *tokenizer.encode("base (1)"),
        tokenizer.eos_token_id,
    ]
    assert a[semconv.AGL_TOKEN_IDS_COMPLETE] is True


def test_responses_create_and_stream(client, openai_test_server, agl_spans):
    openai_test_server.set_replies(["first", "second"])
    with in_rollout():
        result = client.responses.create(model="agl-model", input="Write a SQL query", instructions="Be brief.")
        events = list(
            client.responses.create(model="agl-model", input="Write a SQL query", instructions="Be brief.", stream=True)
        )
    spans = agl_spans.llm_spans()
    assert len(spans) == 2
    assert result.output_text == "first"
    assert events[-1].type == "response.completed"
    for span, text in zip(spans, ["first", "second"], strict=True):
        check_llm_span(span, openai_test_server, MESSAGES, text)
    assert openai_test_server.requests[0].body["enable_response_messages"] is True


def test_text_completions(client, openai_test_server, agl_spans):
    openai_test_server.set_replies(["the rest"])
    result = client.completions.create(model="agl-model", prompt="Complete this:")
    span = only_llm_span(agl_spans)
    a = attrs(span)
    assert span.name == "text_completion agl-model"
    assert a[semconv.GEN_AI_OPERATION_NAME] == "text_completion"
    assert list(a[semconv.AGL_PROMPT_TOKEN_IDS]) == openai_test_server.tokenizer.encode("Complete this:")
    assert list(a[semconv.AGL_RESPONSE_TOKEN_IDS]) == result.choices[0].model_extra["token_ids"]
    assert list(a[semconv.AGL_RESPONSE_LOGPROBS]) == result.choices[0].logprobs.token_logprobs
    assert a[semconv.AGL_TOKEN_IDS_COMPLETE] is True


def test_bare_client_post(client, openai_test_server, agl_spans):
    body = {"model": "agl-model", "messages": MESSAGES}
    with in_rollout():
        result = client.post("/chat/completions", body=body, cast_to=httpx.Response)
    payload = result.json()
    assert body == {"model": "agl-model", "messages": MESSAGES}  # the caller's dict is not touched
    span = only_llm_span(agl_spans)
    check_llm_span(span, openai_test_server, MESSAGES, payload["choices"][0]["message"]["content"])
    assert list(attrs(span)[semconv.AGL_PROMPT_TOKEN_IDS]) == payload["prompt_token_ids"]


def test_tool_call_reply(client, openai_test_server, agl_spans):
    openai_test_server.set_replies([Reply(tool_calls=[ToolCall("run_sql", '{"q": "SELECT 1"}')])])
    result = client.chat.completions.create(
        model="agl-model",
        messages=MESSAGES,
        tools=[{"type": "function", "function": {"name": "run_sql", "parameters": {"type": "object"}}}],
    )
    assert result.choices[0].message.tool_calls[0].function.name == "run_sql"
    a = attrs(only_llm_span(agl_spans))
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
    assert list(a[semconv.AGL_RESPONSE_TOKEN_IDS]) == result.choices[0].model_extra["token_ids"]


def test_length_limit_reported(client, openai_test_server, agl_spans):
    openai_test_server.set_replies(["a long answer that will be cut short by the limit"])
    client.chat.completions.create(model="agl-model", messages=MESSAGES, max_tokens=3)
    a = attrs(only_llm_span(agl_spans))
    assert len(a[semconv.AGL_RESPONSE_TOKEN_IDS]) == 3
    assert a[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("length",)
    assert a[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 3
    assert a[semconv.AGL_TOKEN_IDS_COMPLETE] is True


def test_non_trainable_endpoint_gets_no_vllm_fields(openai_test_server, agl_spans):
    lightning_otel.unregister_trainable_endpoint(openai_test_server.base_url)
    openai_test_server.strict = True
    try:
        strict = openai.OpenAI(base_url=openai_test_server.base_url, api_key="test", max_retries=0)
        strict.chat.completions.create(model="agl-model", messages=MESSAGES)
    finally:
        openai_test_server.strict = False
    a = attrs(only_llm_span(agl_spans))
    assert "return_token_ids" not in openai_test_server.requests[-1].body
    assert semconv.AGL_PROMPT_TOKEN_IDS not in a and semconv.AGL_TOKEN_IDS_COMPLETE not in a


def test_http_error_marks_span_and_raises(client, openai_test_server, agl_spans):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="agl-model", messages=[])
    span = only_llm_span(agl_spans)
    assert span.status.status_code.name == "ERROR"
    assert attrs(span)[semconv.ERROR_TYPE] == "BadRequestError"


def test_non_llm_requests_make_no_span(client, agl_spans):
    assert client.models.list().data[0].id == "agl-tiny"
    assert agl_spans.llm_spans() == []


def test_content_capture_is_opt_in(client, openai_test_server, agl_spans):
    from lightning_otel.capture.settings import settings

    openai_test_server.set_replies(["captured"])
    settings.configure(capture_content="SPAN_AND_EVENT")
    try:
        client.chat.completions.create(model="agl-model", messages=MESSAGES)
    finally:
        settings.configure(capture_content=False)
    span = only_llm_span(agl_spans)
    a = attrs(span)
    assert json.loads(a[semconv.GEN_AI_INPUT_MESSAGES])[1] == {
        "role": "user",
        "parts": [{"type": "text", "content": "Write a SQL query"}],
    }
    output = json.loads(a[semconv.GEN_AI_OUTPUT_MESSAGES])
    assert output == [
        {"role": "assistant", "parts": [{"type": "text", "content": "captured"}], "finish_reason": "stop"}
    ]
    assert span.events[0].name == semconv.GEN_AI_CONTENT_EVENT


# --- async ---------------------------------------------------------------------------------------------------
async def test_async_create(aclient, openai_test_server, agl_spans):
    openai_test_server.set_replies(["async answer"])
    with in_rollout():
        await aclient.chat.completions.create(model="agl-model", messages=MESSAGES)
    check_llm_span(only_llm_span(agl_spans), openai_test_server, MESSAGES, "async answer")


async def test_async_stream_and_raw_response(aclient, openai_test_server, agl_spans):
    openai_test_server.set_replies(["streamed", "raw"])
    with in_rollout():
        stream = await aclient.chat.completions.create(model="agl-model", messages=MESSAGES, stream=True)
        async for _ in stream:
            pass
        raw = await aclient.chat.completions.with_raw_response.create(model="agl-model", messages=MESSAGES)
        raw.parse()
    spans = agl_spans.llm_spans()
    assert len(spans) == 2
    check_llm_span(spans[0], openai_test_server, MESSAGES, "streamed")
    check_llm_span(spans[1], openai_test_server, MESSAGES, "raw")


async def test_async_stream_early_break(aclient, openai_test_server, agl_spans):
    openai_test_server.set_replies(["one two three four five"])
    with in_rollout():
        stream = await aclient.chat.completions.create(model="agl-model", messages=MESSAGES, stream=True)
        seen = 0
        async for _ in stream:  # the first chunk carries the role and the prompt ids, the second one token
            seen += 1
            if seen == 2:
                break
        await stream.close()
    a = attrs(only_llm_span(agl_spans))
    assert a[semconv.AGL_TOKEN_IDS_COMPLETE] is False
    assert len(a[semconv.AGL_RESPONSE_TOKEN_IDS]) == 1


async def test_async_with_streaming_response(aclient, openai_test_server, agl_spans):
    with in_rollout():
        async with aclient.chat.completions.with_streaming_response.create(
            model="agl-model", messages=MESSAGES
        ) as response:
            result = await response.parse()
    check_llm_span(only_llm_span(agl_spans), openai_test_server, MESSAGES, result.choices[0].message.content)


async def test_async_responses(aclient, openai_test_server, agl_spans):
    openai_test_server.set_replies(["resp"])
    with in_rollout():
        await aclient.responses.create(model="agl-model", input="Write a SQL query", instructions="Be brief.")
    check_llm_span(only_llm_span(agl_spans), openai_test_server, MESSAGES, "resp")
