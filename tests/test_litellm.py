"""LiteLLM: one LLM span per call with the same contract, never a second span from the OpenAI client below."""

from __future__ import annotations

import pytest

litellm = pytest.importorskip("litellm")

import lightning_otel  # noqa: E402
from lightning_otel import semconv  # noqa: E402
from tests.helpers import attrs  # noqa: E402

MESSAGES = [{"role": "user", "content": "Write a SQL query"}]


@pytest.mark.parametrize("model", ["openai/agl-model", "hosted_vllm/agl-model"])
def test_completion_one_span_with_exact_ids(model, openai_test_server, agl_spans):
    openai_test_server.set_replies(["SELECT 1;"])
    with lightning_otel.rollout_context("ro-l", "at-l"), lightning_otel.agent("writer"):
        result = litellm.completion(
            model=model, api_base=openai_test_server.base_url, api_key="t", messages=MESSAGES, temperature=0.3
        )
    assert result.choices[0].message.content == "SELECT 1;"
    (span,) = agl_spans.llm_spans()
    a = attrs(span)
    tokenizer = openai_test_server.tokenizer
    assert list(a[semconv.AGL_PROMPT_TOKEN_IDS]) == tokenizer.encode_chat(MESSAGES)
    assert list(a[semconv.AGL_RESPONSE_TOKEN_IDS]) == [*tokenizer.encode("SELECT 1;"), tokenizer.eos_token_id]
    assert a[semconv.AGL_TOKEN_IDS_COMPLETE] is True
    assert a[semconv.GEN_AI_AGENT_NAME] == "writer"
    assert a[semconv.AGL_ROLLOUT_ID] == "ro-l"
    assert a[semconv.GEN_AI_REQUEST_MODEL] == "agl-model"
    assert a[semconv.GEN_AI_REQUEST_TEMPERATURE] == 0.3
    assert a[semconv.GEN_AI_PROVIDER_NAME] == "vllm"
    assert openai_test_server.requests[-1].body["return_token_ids"] is True


async def test_acompletion_through_openai_client(openai_test_server, agl_spans):
    openai_test_server.set_replies(["async"])
    with lightning_otel.rollout_context("ro-a"):
        await litellm.acompletion(
            model="openai/agl-model", api_base=openai_test_server.base_url, api_key="t", messages=MESSAGES
        )
    (span,) = agl_spans.llm_spans()
    assert list(attrs(span)[semconv.AGL_RESPONSE_TOKEN_IDS]) == [
        *openai_test_server.tokenizer.encode("async"),
        openai_test_server.tokenizer.eos_token_id,
    ]


def test_streaming_through_openai_client_is_complete(openai_test_server, agl_spans):
    openai_test_server.set_replies(["streamed via litellm"])
    stream = litellm.completion(
        model="openai/agl-model",
        api_base=openai_test_server.base_url,
        api_key="t",
        messages=MESSAGES,
        stream=True,
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    assert text == "streamed via litellm"
    (span,) = agl_spans.llm_spans()
    a = attrs(span)
    tokenizer = openai_test_server.tokenizer
    assert list(a[semconv.AGL_RESPONSE_TOKEN_IDS]) == [*tokenizer.encode(text), tokenizer.eos_token_id]
    assert a[semconv.AGL_TOKEN_IDS_COMPLETE] is True


def test_hosted_vllm_streaming_is_flagged_incomplete(openai_test_server, agl_spans):
    """LiteLLM's hosted_vllm stream chunks drop the prompt ids: the span says so instead of pretending."""
    stream = litellm.completion(
        model="hosted_vllm/agl-model",
        api_base=openai_test_server.base_url,
        api_key="t",
        messages=MESSAGES,
        stream=True,
    )
    for _ in stream:
        pass
    (span,) = agl_spans.llm_spans()
    assert attrs(span)[semconv.AGL_TOKEN_IDS_COMPLETE] is False


def test_error_ends_span_with_error(openai_test_server, agl_spans):
    with pytest.raises(litellm.BadRequestError):
        litellm.completion(
            model="openai/agl-model",
            api_base=openai_test_server.base_url,
            api_key="t",
            messages=[],
            num_retries=0,
        )
    spans = agl_spans.llm_spans()
    assert len(spans) == 1
    assert spans[0].status.status_code.name == "ERROR"
