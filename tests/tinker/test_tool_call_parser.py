"""Tool calls read from the model's own text, as vLLM's `hermes` parser reads them: our replicas answer a request that
offers tools with `tool_calls` (whole and streamed, through the OpenAI SDK), the sampled token ids untouched, and the
text alone where the request offers no tools, says `tool_choice: "none"`, or the replica has no parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import OpenAI
from transformers import AutoTokenizer

from lightning_otel.serving.sampler_api import HFChatTokenizer, ReplicaServer
from lightning_otel.serving.tool_parsers import parse_hermes
from lightning_otel.training.tinker.engine import EngineSamplerReplica
from lightning_otel.training.tinker.types import SampledSequence, SamplingParams

CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 17, "b": 25}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]  # fmt: skip


def test_hermes_blocks_as_vllm_reads_them() -> None:
    assert parse_hermes("no call here").content == "no call here"
    assert parse_hermes("no call here").tool_calls == []
    parsed = parse_hermes("Let me add. " + CALL)
    assert parsed.content == "Let me add. "
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls] == [
        ("add", {"a": 17, "b": 25})
    ]
    assert parsed.tool_calls[0]["id"].startswith("chatcmpl-tool-") and parsed.tool_calls[0]["type"] == "function"
    two = parse_hermes(CALL + "\n" + CALL.replace("add", "sub"))
    assert two.content is None and [c["function"]["name"] for c in two.tool_calls] == ["add", "sub"]
    unclosed = parse_hermes('<tool_call>\n{"name": "add", "arguments": {"a": 1}}')  # cut at max_tokens: whole JSON
    assert unclosed.tool_calls[0]["function"]["arguments"] == '{"a": 1}'
    assert parse_hermes('<tool_call>{"name": "add"}</tool_call>').tool_calls[0]["function"]["arguments"] == "{}"
    for broken in ('<tool_call>{"name": "add", "argu', "<tool_call>[1, 2]</tool_call>", "<tool_call>{}</tool_call>"):
        assert parse_hermes(broken).content == broken and parse_hermes(broken).tool_calls == []


class _Scripted:
    """A sampler whose every sample is the token ids of one text."""

    version = 7

    def __init__(self, token_ids: list[int]) -> None:
        self.token_ids = token_ids

    def sample(self, prompt: list[int], num_samples: int, params: SamplingParams) -> list[SampledSequence]:
        return [SampledSequence(list(self.token_ids), [-0.1] * len(self.token_ids), "stop")]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> HFChatTokenizer:
    return HFChatTokenizer(AutoTokenizer.from_pretrained(tiny_model_dir))


def _client(server: ReplicaServer) -> OpenAI:
    return OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def test_a_request_with_tools_gets_the_calls_and_the_sampled_ids(tokenizer: HFChatTokenizer) -> None:
    text = "Adding. " + CALL
    ids = tokenizer.encode(text)
    replica = EngineSamplerReplica(_Scripted(ids), tokenizer)
    messages = [{"role": "user", "content": "What is 17 + 25?"}]
    with ReplicaServer(replica) as server:
        client = _client(server)
        response = client.chat.completions.create(
            model="agl-policy", messages=messages, tools=TOOLS, extra_body={"return_token_ids": True}
        )
        choice = response.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Adding. "
        call = choice.message.tool_calls[0]
        assert (call.function.name, json.loads(call.function.arguments)) == ("add", {"a": 17, "b": 25})
        assert choice.model_extra["token_ids"] == ids  # the sampled ids: the call's text, as the model wrote it

        streamed = client.chat.completions.create(model="agl-policy", messages=messages, tools=TOOLS, stream=True)
        deltas = [chunk.choices[0].delta for chunk in streamed if chunk.choices]
        calls = [c for delta in deltas for c in delta.tool_calls or []]
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("add", {"a": 17, "b": 25})]

        for extra in ({"tool_choice": "none", "tools": TOOLS}, {}):  # told not to call, or offered no tools
            plain = client.chat.completions.create(model="agl-policy", messages=messages, **extra).choices[0]
            assert (plain.message.content, plain.message.tool_calls, plain.finish_reason) == (text, None, "stop")


def test_a_replica_without_a_parser_answers_with_the_text(tokenizer: HFChatTokenizer) -> None:
    text = "Adding. " + CALL
    replica = EngineSamplerReplica(_Scripted(tokenizer.encode(text)), tokenizer, tool_call_parser=None)
    with ReplicaServer(replica) as server:
        choice = (
            _client(server)
            .chat.completions.create(
                model="agl-policy", messages=[{"role": "user", "content": "17 + 25?"}], tools=TOOLS
            )
            .choices[0]
        )
    assert (choice.message.content, choice.message.tool_calls) == (text, None)
    with pytest.raises(ValueError, match="unknown tool_call_parser 'pythonic'"):
        EngineSamplerReplica(_Scripted([1]), tokenizer, tool_call_parser="pythonic")
