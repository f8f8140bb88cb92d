"""The CPU policy replica: vLLM-format token ids and logprobs from a real (tiny, random) HF model, equal to what a
trainer recomputes; weight updates; and the gateway + instrumented client path on top of it."""

from __future__ import annotations

import openai
import pytest
import torch

import lightning_otel
from lightning_otel.serving.cpu_replica import CPUReplica, ReplicaServer
from lightning_otel.serving.gateway import GatewayServer, PolicyGateway
from lightning_otel.testing import SpanCapture, build_tokenizer
from lightning_otel.testing.tiny_model import tiny_policy

TOKENIZER = build_tokenizer()


@pytest.fixture(scope="module")
def replica() -> CPUReplica:
    return CPUReplica(tiny_policy(TOKENIZER, seed=1), TOKENIZER, seed=7)


def recomputed_logprobs(
    model: torch.nn.Module, prompt: list[int], response: list[int], temperature: float
) -> list[float]:
    """What a trainer's old-log-prob pass computes for the sampled tokens."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(response)[:, None]).squeeze(1).tolist()


def test_sampled_logprobs_equal_the_trainers_recomputation(replica: CPUReplica) -> None:
    prompt = TOKENIZER.encode(TOKENIZER.render_chat([{"role": "user", "content": "write a query"}]))
    generation = replica.generate(prompt, max_tokens=24, temperature=0.8)
    assert generation.token_ids and len(generation.logprobs) == len(generation.token_ids)
    again = recomputed_logprobs(replica.model, prompt, generation.token_ids, 0.8)
    assert max(abs(a - b) for a, b in zip(generation.logprobs, again, strict=True)) < 1e-4  # rollout_probs_diff


def test_weight_updates_change_the_policy_and_its_version(replica: CPUReplica) -> None:
    prompt = TOKENIZER.encode("hello")
    before = replica.generate(prompt, max_tokens=8, temperature=0)
    other = tiny_policy(TOKENIZER, seed=2).state_dict()
    assert replica.update_weights(other) == 1
    after = replica.generate(prompt, max_tokens=8, temperature=0)
    assert before.token_ids != after.token_ids and replica.weight_version == 1


@pytest.mark.parametrize("stream", [False, True])
def test_behind_the_gateway_an_instrumented_client_gets_the_replicas_ids(
    replica: CPUReplica, agl_spans: SpanCapture, stream: bool
) -> None:
    sampling = {"temperature": 1.0, "max_tokens": 16}
    with (
        ReplicaServer(replica) as served,
        GatewayServer(PolicyGateway([served.base_url], sampling=sampling)) as gateway,
    ):
        lightning_otel.register_trainable_endpoint(gateway.base_url)
        client = openai.OpenAI(base_url=gateway.base_url, api_key="t", max_retries=0)
        with lightning_otel.rollout_context("ro-cpu", "at-1"), lightning_otel.agent("write"):
            messages = [{"role": "user", "content": "write a query"}]
            if stream:
                chunks = list(client.chat.completions.create(model="agl-policy", messages=messages, stream=True))
                response_id = chunks[0].id
            else:
                response_id = client.chat.completions.create(model="agl-policy", messages=messages).id
    lightning_otel.flush()
    spans = [s for s in agl_spans.llm_spans() if s.attributes.get("gen_ai.response.id") == response_id]
    assert len(spans) == 2  # the client's and the gateway's, one response id
    client_span, gateway_span = sorted(spans, key=lambda s: s.start_time)
    assert client_span.attributes["gen_ai.agent.name"] == "write"
    for key in ("agl.llm.prompt_token_ids", "agl.llm.response_token_ids", "agl.llm.response_logprobs"):
        assert list(client_span.attributes[key]) == list(gateway_span.attributes[key])
    prompt = list(client_span.attributes["agl.llm.prompt_token_ids"])
    response = list(client_span.attributes["agl.llm.response_token_ids"])
    assert prompt == TOKENIZER.encode(TOKENIZER.render_chat(messages))
    assert 0 < len(response) <= 16  # the gateway's max_tokens was enforced
    again = recomputed_logprobs(replica.model, prompt, response, 1.0)
    assert (
        max(abs(a - b) for a, b in zip(client_span.attributes["agl.llm.response_logprobs"], again, strict=True)) < 1e-4
    )


def test_concurrent_requests_sample_in_one_batch_each_with_its_own_settings() -> None:
    """Left padding, per-row temperature and max_tokens, a prompt asked twice: each answer's logprobs are still what a
    trainer recomputes for that prompt alone, greedy rows answer as they do alone, the batch took one forward a
    token, and the first read each distinct prompt once."""
    replica = CPUReplica(tiny_policy(TOKENIZER, seed=3), TOKENIZER, seed=11)
    prompts = [TOKENIZER.encode(TOKENIZER.render_chat([{"role": "user", "content": "q " * k}])) for k in (1, 5, 12)]
    alone = replica.generate(prompts[1], max_tokens=10, temperature=0)
    forwards: list[int] = []  # rows of each forward's input
    hook = replica.model.register_forward_pre_hook(lambda _, args, kwargs: forwards.append(len(kwargs["input_ids"])),
                                                   with_kwargs=True)  # fmt: skip
    try:
        settings = [(prompts[0], 12, 1.0), (prompts[1], 10, 0.0), (prompts[2], 6, 0.7), (prompts[0], 3, 1.3)]
        with replica._lock:  # busy (as during a weight update): the requests wait and then go together
            futures = [replica._submit(p, n, t, 1.0) for p, n, t in settings]
        generations = [future.result(timeout=60) for future in futures]
    finally:
        hook.remove()
    assert len(forwards) <= 12  # one batch: a forward per token of the longest answer, not one per answer per token
    assert forwards[0] == 3 and set(forwards[1:]) == {4}  # 3 distinct prompts read, then 4 rows decoded
    assert generations[1].token_ids == alone.token_ids
    for (prompt, max_tokens, temperature), generation in zip(settings, generations, strict=True):
        assert 0 < len(generation.token_ids) <= max_tokens
        assert generation.finish_reason == ("stop" if generation.token_ids[-1] == TOKENIZER.eos_token_id else "length")
        again = recomputed_logprobs(replica.model, prompt, generation.token_ids, temperature or 1.0)
        assert max(abs(a - b) for a, b in zip(generation.logprobs, again, strict=True)) < 1e-4


def test_a_bad_prompt_is_refused_alone_and_the_replica_keeps_serving(replica: CPUReplica) -> None:
    with pytest.raises(ValueError, match="vocabulary"):
        replica.generate([1, 10**6], max_tokens=4)
    with pytest.raises(ValueError, match="no tokens"):
        replica.generate([], max_tokens=4)
    many = replica.generate_many([TOKENIZER.encode("hello")] * 5, max_tokens=6, temperature=1.0)
    assert len(many) == 5 and all(0 < len(g.token_ids) <= 6 for g in many)


def test_a_group_of_samples_goes_in_one_batch() -> None:
    """generate_many queues its prompts at once: a drain started by the first must not take it alone (a group's
    prompt read twice, its samples in two batches)."""
    replica = CPUReplica(tiny_policy(TOKENIZER, seed=1), TOKENIZER, seed=7)
    sizes: list[int] = []
    sample_batch = replica._sample_batch

    def counted(requests):  # type: ignore[no-untyped-def]
        sizes.append(len(requests))
        return sample_batch(requests)

    replica._sample_batch = counted  # type: ignore[method-assign]
    prompt = TOKENIZER.encode("hello")
    for _ in range(30):
        replica.generate_many([prompt] * 8, max_tokens=1)
    assert sizes == [8] * 30


def test_samples_do_not_depend_on_which_requests_were_batched_together() -> None:
    """Each request draws from its own stream (seed, weight version, prompt, how many samples of that prompt came
    before): the same requests give the same samples batched together or one by one, in another order."""
    prompts = [TOKENIZER.encode(TOKENIZER.render_chat([{"role": "user", "content": text}])) for text in ("a b", "c")]
    together = CPUReplica(tiny_policy(TOKENIZER, seed=4), TOKENIZER, seed=5)
    with together._lock:  # busy: the three requests wait and go in one batch
        futures = [together._submit(p, 12, 1.0, 1.0) for p in (prompts[0], prompts[1], prompts[0])]
    batched = [future.result(timeout=60).token_ids for future in futures]
    alone = CPUReplica(tiny_policy(TOKENIZER, seed=4), TOKENIZER, seed=5)
    second = alone.generate(prompts[1], max_tokens=12, temperature=1.0).token_ids
    first = [alone.generate(prompts[0], max_tokens=12, temperature=1.0).token_ids for _ in range(2)]
    assert [first[0], second, first[1]] == batched
    assert first[0] != first[1]  # two samples of one prompt are two streams, not one stream twice
    other_seed = CPUReplica(tiny_policy(TOKENIZER, seed=4), TOKENIZER, seed=6)
    assert other_seed.generate(prompts[0], max_tokens=12, temperature=1.0).token_ids != first[0]


def test_samples_follow_the_models_distribution() -> None:
    """The inverse-CDF draw from per-request streams samples softmax(logits / T). Tokens cut into ten groups of
    equal mass, once ranked by probability and once in id order: each group's share of 2,000 first tokens is its
    mass within 4 standard errors."""
    replica = CPUReplica(tiny_policy(TOKENIZER, seed=8), TOKENIZER, seed=9, max_batch=500)
    prompt = TOKENIZER.encode("select the name")
    temperature = 0.3
    with torch.no_grad():
        logits = replica.model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
    probabilities = torch.softmax(logits / temperature, dim=-1)
    n = 2000
    firsts = torch.tensor(
        [g.token_ids[0] for g in replica.generate_many([prompt] * n, max_tokens=1, temperature=temperature)]
    )
    for order in (torch.argsort(probabilities, descending=True), torch.arange(len(probabilities))):
        group_of = torch.empty_like(order)
        group_of[order] = (probabilities[order].cumsum(0) * 10).long().clamp(max=9)  # token id -> its mass decile
        counts = torch.bincount(group_of[firsts], minlength=10).float()
        masses = torch.zeros(10).index_add_(0, group_of, probabilities)
        for group in range(10):
            p, observed = float(masses[group]), float(counts[group]) / n
            assert abs(observed - p) < 4 * (p * (1 - p) / n) ** 0.5 + 1e-3, (group, p, observed)


def test_like_vllm_it_renders_tools_refuses_a_prompt_over_the_context_and_tokenizes(tmp_path) -> None:
    """What a harness meets at a real server: the tools it offers rendered by the model's template; a prompt over
    the model's context refused with vLLM's 400 (the gateway's dialects turn it into their own error); `/tokenize`
    (Anthropic's count_tokens reads it)."""
    from transformers import AutoTokenizer

    from lightning_otel.serving.sampler_api import HFChatTokenizer
    from lightning_otel.testing.tiny_model import save_tiny_model

    folder = save_tiny_model(tmp_path / "tiny", context_length=160)
    hf = AutoTokenizer.from_pretrained(folder)
    hf.chat_template = (
        "{% if tools %}{{ '<|im_start|>system\\nTools: ' + (tools | map(attribute='function.name')"
        " | join(', ')) + '<|im_end|>\\n' }}{% endif %}" + hf.chat_template
    )  # a template with tools
    tokenizer = HFChatTokenizer(hf)
    replica = CPUReplica(tiny_policy(TOKENIZER, seed=1, context_length=160), tokenizer)
    assert replica.max_model_len == 160  # the model's own positions
    tools = [{"type": "function", "function": {"name": "run_sql", "parameters": {"type": "object"}}}]
    ask = [{"role": "user", "content": "count the orders"}]
    with ReplicaServer(replica) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0)
        plain = client.chat.completions.create(
            model="m", messages=ask, max_tokens=4, extra_body={"return_token_ids": True}
        )
        with_tools = client.chat.completions.create(model="m", messages=ask, tools=tools, max_tokens=4,
                                                    extra_body={"return_token_ids": True})  # fmt: skip
        prompt = with_tools.model_extra["prompt_token_ids"]
        assert "Tools: run_sql" in hf.decode(prompt) and len(prompt) > len(plain.model_extra["prompt_token_ids"])
        with pytest.raises(openai.BadRequestError, match="maximum context length is 160 tokens"):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "count " * 200}], max_tokens=4
            )
        counted = openai.DefaultHttpxClient().post(server.base_url.removesuffix("/v1") + "/tokenize",
                                                   json={"messages": ask, "tools": tools}).json()  # fmt: skip
        assert counted["tokens"] == prompt and counted["max_model_len"] == 160


def test_an_assistant_turn_of_tool_calls_renders_with_a_template_that_adds_content_as_a_string(tmp_path) -> None:
    """SmolLM2's template adds `message['content']` as a string: an assistant turn that only called a tool (content
    None, as the dialects and the agents send it) must render, as vLLM renders it, not fail the request."""
    from transformers import AutoTokenizer

    from lightning_otel.serving.sampler_api import HFChatTokenizer
    from lightning_otel.testing.tiny_model import save_tiny_model

    hf = AutoTokenizer.from_pretrained(save_tiny_model(tmp_path / "tiny"))
    hf.chat_template = (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
        " + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
        "{% endif %}"
    )  # SmolLM2-135M-Instruct's, without its default system prompt
    call = {"id": "c1", "type": "function", "function": {"name": "run_sql", "arguments": "{}"}}
    chat = [{"role": "user", "content": "count"}, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "12"}]  # fmt: skip
    rendered = HFChatTokenizer(hf).render_chat(chat)
    assert "<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\n12<|im_end|>" in rendered
