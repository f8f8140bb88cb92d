"""verl batch construction against verl 0.9.1's real DataProto and GRPO advantage, with real tokenizer ids."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from lightning_otel.adapters.triplets import Triplet
from lightning_otel.testing import build_tokenizer
from lightning_otel.training.verl.batch import BatchShape, Sample, build_batch

TOKENIZER = build_tokenizer()


def triplet(question: str, answer: str, *, agent: str = "write", inserted: str = "", second: str = "") -> Triplet:
    """A call as the adapter produces it: the server's prompt ids, sampled ids (plus, for a merged trajectory,
    tokens the agent inserted with mask 0 and a second sampled turn)."""
    prompt = TOKENIZER.encode(TOKENIZER.render_chat([{"role": "user", "content": question}]))
    sampled = [*TOKENIZER.encode(answer), TOKENIZER.eos_token_id]
    response, mask = list(sampled), [1] * len(sampled)
    if inserted:
        extra, more = TOKENIZER.encode(inserted), [*TOKENIZER.encode(second), TOKENIZER.eos_token_id]
        response += extra + more
        mask += [0] * len(extra) + [1] * len(more)
    logprobs = [-0.01 * (i + 1) if m else 0.0 for i, m in enumerate(mask)]
    return Triplet(prompt, response, logprobs, mask, None, {}, agent, f"ro-{question}", "at-1", ["id"], ["s"])


SHAPE = BatchShape(
    max_prompt_length=64, max_response_length=48, pad_token_id=TOKENIZER.tokenizer.token_to_id("<|endoftext|>")
)


def test_rows_decode_to_exactly_what_the_server_saw_and_sampled() -> None:
    samples = [
        Sample(triplet("orders 2024", "SELECT 1;"), 1.0, "g1"),
        Sample(triplet("orders 2025", "SELECT 2;", inserted="tool said ok", second="done"), 0.5, "g1"),
    ]
    batch, stats = build_batch(samples, SHAPE)
    assert (stats.rows, stats.padding_rows, stats.groups) == (2, 0, 1)
    t = batch.batch
    # as wide as the batch's longest prompt and reply (the shape's lengths are caps)
    width = max(len(sample.triplet.prompt_token_ids) for sample in samples)
    reply = max(len(sample.triplet.response_token_ids) for sample in samples)
    assert width < 64 and reply < 48
    assert t["prompts"].shape == (2, width) and t["responses"].shape == (2, reply)
    assert t["input_ids"].shape == (2, width + reply)
    for index, sample in enumerate(samples):
        prompt_ids = t["prompts"][index][t["attention_mask"][index, :width] == 1].tolist()
        assert prompt_ids == sample.triplet.prompt_token_ids  # left-padded, ids untouched
        assert t["prompts"][index, : width - len(prompt_ids)].eq(SHAPE.pad_token_id).all()
        trained = t["responses"][index][t["response_mask"][index] == 1].tolist()
        expected = [
            i for i, m in zip(sample.triplet.response_token_ids, sample.triplet.response_mask, strict=True) if m
        ]
        assert trained == expected  # only sampled tokens are trained
        length = len(sample.triplet.response_token_ids)
        assert t["token_level_scores"][index].nonzero().flatten().tolist() == [length - 1]  # reward on the last token
        assert t["token_level_scores"][index, length - 1].item() == pytest.approx(sample.reward)
        assert t["rollout_log_probs"][index, :length].tolist() == pytest.approx(sample.triplet.response_logprobs)
        positions = t["position_ids"][index][t["attention_mask"][index] == 1].tolist()
        assert positions == list(range(len(positions)))
    masked = t["responses"][1][(t["response_mask"][1] == 0) & (t["attention_mask"][1, width:] == 1)].tolist()
    assert TOKENIZER.decode(masked) == TOKENIZER.decode(TOKENIZER.encode("tool said ok"))  # inserted, not trained
    assert list(batch.non_tensor_batch["uid"]) == ["g1", "g1"]
    assert list(batch.non_tensor_batch["agent_name"]) == ["write", "write"]
    assert all(m == {} for m in batch.non_tensor_batch["multi_modal_inputs"])


def test_grpo_advantages_follow_the_groups_and_padding_trains_nothing() -> None:
    samples = [
        Sample(triplet("a", "x"), 1.0, "task-a"),
        Sample(triplet("a", "y"), 0.0, "task-a"),
        Sample(triplet("b", "z"), 0.5, "task-b"),  # zero variance: both rollouts scored alike
        Sample(triplet("b", "w"), 0.5, "task-b"),
        Sample(triplet("c", "v"), 1.0, "task-c"),
    ]
    batch, stats = build_batch(samples, SHAPE, row_multiple=4)
    assert (stats.rows, stats.padding_rows, len(batch)) == (5, 3, 8)
    assert stats.group_sizes == [1, 2, 2]
    t = batch.batch
    advantages, _ = compute_grpo_outcome_advantage(
        t["token_level_scores"], t["response_mask"], np.array(batch.non_tensor_batch["uid"], dtype=object)
    )
    per_row = [(advantages[i] * t["response_mask"][i]).sum().item() for i in range(8)]
    assert per_row[0] > 0 > per_row[1]  # the better rollout of task a is pushed up, the worse down
    assert per_row[2] == pytest.approx(0) and per_row[3] == pytest.approx(0)  # zero-variance group: no gradient
    assert all(value == 0 for value in per_row[5:])  # padding rows are masked out entirely
    assert t["response_mask"][5:].sum().item() == 0


def test_long_prompts_are_dropped_and_long_responses_cut_to_the_sampled_prefix() -> None:
    long_prompt = Sample(triplet("q " * 80, "ok"), 1.0, "g")
    long_answer = Sample(triplet("short", "word " * 60), 1.0, "g")
    batch, stats = build_batch([long_prompt, long_answer], SHAPE)
    assert (stats.rows, stats.dropped_long_prompts, stats.truncated_responses) == (1, 1, 1)
    t = batch.batch
    assert t["responses"][0].tolist() == long_answer.triplet.response_token_ids[:48]
    assert t["response_mask"][0].sum().item() == 48
    assert t["token_level_scores"][0, 47].item() == 1.0


def test_a_batch_with_nothing_to_train_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no trainable rows"):
        build_batch([Sample(triplet("q " * 80, "ok"), 1.0, "g")], SHAPE)
    assert torch.__version__  # the CPU build verl runs on here
