"""On-policy distillation (`training.loop.distillation`): a teacher scores the tokens the student sampled. Its
signal per token is the teacher's logprob minus the sampled one (zero where the teacher is the student in the
student's own context), added to the reward advantage or alone; it trains a run whose rewards never vary; the
teacher's context is filled from each task; a backend that cannot score token ids refuses it when the loop is made."""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest
import torch

import lightning_otel as agl
from lightning_otel.adapters.triplets import Triplet
from lightning_otel.collector import Client
from lightning_otel.training.loop.distillation import Distillation, distill
from lightning_otel.training.loop.samples import Sample
from lightning_otel.training.tinker.backend import teacher_sampler
from lightning_otel.training.tinker.types import SamplingParams
from tests.tinker.test_tinker_training import TASKS, tinker


def sample(rollout: str, logprobs: list[float], mask: list[int] | None = None, advantage: float = 0.5) -> Sample:
    triplet = Triplet([1, 2, 3], [4, 5, 6], logprobs, mask or [1, 1, 1], reward=1.0, rewards={}, agent_name="a",
                      rollout_id=rollout, attempt_id=None, response_ids=[], span_ids=[])  # fmt: skip
    return Sample(triplet, reward=1.0, group="g", advantage=advantage)


def test_each_tokens_signal_is_the_teachers_logprob_minus_the_sampled_one_in_the_teachers_context() -> None:
    seen: list[list[list[int]]] = []
    tokenized: list[str] = []

    def scorer(_: Sample):
        def score(sequences):
            seen.append([list(ids) for ids in sequences])
            return [[None] * (len(ids) - 3) + [-1.0, -2.0, -0.5] for ids in sequences]

        return score

    def context_ids(text: str) -> list[int]:
        tokenized.append(text)
        return [90 + len(text)]

    first, masked = sample("r1", [-2.0, -2.0, -2.0]), sample("r2", [-1.0, -1.0, -1.0], mask=[1, 0, 1])
    again = sample("r1", [-2.0, -2.0, -2.0])  # the same rollout's task: its context is not tokenized again
    distillation = Distillation(weight=0.5, context="the answer is {answer}")
    tasks = {"r1": {"answer": "7"}, "r2": {"answer": "42"}}
    metrics = distill([first, masked, again], distillation, scorer, context_ids, tasks)
    # the context before the prompt, per task; the policy's samples scored in one call
    assert seen == [[[105, 1, 2, 3, 4, 5, 6], [106, 1, 2, 3, 4, 5, 6], [105, 1, 2, 3, 4, 5, 6]]]
    assert tokenized == ["the answer is 7", "the answer is 42"]
    assert first.token_advantages == [0.5, 0.0, 0.75] and first.advantage == 0.5  # added to GRPO's
    assert masked.token_advantages == [0.0, 0.0, 0.25]  # an inserted token (mask 0) gets nothing
    assert first.teacher_logprobs == [-1.0, -2.0, -0.5]
    assert metrics["distill/samples"] == 3 and metrics["distill/tokens"] == 8
    assert metrics["distill/reverse_kl"] == pytest.approx((2 * (-1.0 + 0.0 - 1.5) + 0.0 - 0.5) / 8)

    alone = sample("r1", [-2.0, -2.0, -2.0])
    distill([alone], Distillation(context="{answer}", alone=True), scorer, lambda text: [], {"r1": {"answer": "7"}})
    assert alone.advantage == 0.0 and alone.token_advantages == [1.0, 0.0, 1.5]


def test_a_distillation_that_cannot_work_is_refused_when_it_is_made() -> None:
    with pytest.raises(ValueError, match=r"self-distillation .* needs a context"):
        Distillation()
    with pytest.raises(ValueError, match="weight must be > 0"):
        Distillation(weight=0.0, context="{answer}")
    with pytest.raises(ValueError, match=r"names \['gold'\] but the task has only \['question'\]"):
        Distillation(context="{gold}").context_for({"question": "q"})
    with pytest.raises(TypeError, match="distillation takes a Distillation"):
        agl.TrainingOptions(distillation={"context": "{answer}"})  # type: ignore[arg-type]


def test_the_student_scored_in_its_own_context_is_its_sampled_logprobs(tiny_model_dir: Path) -> None:
    """What makes self-distillation's signal the context's alone: scored without it, every token's signal is 0."""
    engine = agl.LocalEngine(tiny_model_dir, rank=4, seed=0)
    sampler = engine.save_weights_and_get_sampler("s")
    prompt = engine.chat_tokenizer.encode("Question number 3?")
    for temperature in (1.0, 0.7):
        sequence = sampler.sample(prompt, 1, SamplingParams(max_tokens=6, temperature=temperature, seed=2))[0]
        scored = sampler.compute_logprobs(prompt + sequence.tokens, temperature)
        assert scored[0] is None and len(scored) == len(prompt) + len(sequence.tokens)
        assert scored[len(prompt) :] == pytest.approx(sequence.logprobs, abs=1e-4)


def test_a_groups_sequences_scored_at_once_are_scored_as_one_at_a_time(tiny_model_dir: Path) -> None:
    """The teacher scores a step's sequences in batches whose shared prompt is read once: the same logprobs as a
    forward over each sequence alone, whatever the replies' lengths and the batch's order."""
    engine = agl.LocalEngine(tiny_model_dir, rank=4, seed=0)
    sampler = engine.save_weights_and_get_sampler("s")
    prompt = engine.chat_tokenizer.encode("A system turn long enough to be shared by the group. " * 3 + "Question 3?")
    other = engine.chat_tokenizer.encode("Another task entirely.")
    replies = [[5, 6, 7], [8], [9, 10, 11, 12, 13], [5, 6, 7, 14], [15, 16]]
    group = [prompt + reply for reply in replies]  # one batch, its prompt read once
    mixed = [[*other, 5, 6], *group[:2]]  # little shared: each row read whole
    model = sampler._replica.model
    for temperature, sequences in ((1.0, group), (0.7, group), (1.0, mixed)):
        batched = sampler.compute_logprobs_many(sequences, temperature)
        for ids, scored in zip(sequences, batched, strict=True):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float() / temperature
            alone = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
            assert scored[0] is None and scored[1:] == pytest.approx(alone, abs=1e-4)


def test_self_distillation_trains_a_run_whose_rewards_never_vary(tiny_model_dir: Path, collector: str) -> None:
    steps: list[dict[str, float]] = []
    distillation = agl.Distillation(context="Answer question {task_id} in one word.")
    algorithm = tinker(tiny_model_dir, schedule={"max_steps": 2}, distillation=distillation,
                       on_step=lambda step, metrics: steps.append(metrics))  # fmt: skip
    trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=algorithm)
    result = trainer.fit("tests.tinker.agents:constant_agent", TASKS[:2])  # without the teacher: NothingTrained

    assert [record.skipped_because for record in result.steps] == [[], []]
    for metrics in steps:
        assert metrics["rollout/zero_variance_groups"] == 2  # every reward tied ...
        assert metrics["train/datums"] == 8 and metrics["train/constant_groups"] == 0  # ... and every sample trained
        assert metrics["distill/samples"] == 8 and metrics["distill/tokens"] > 0
        assert metrics["training/samples_with_advantage"] == 8  # "with signal" on the step line
        assert math.isfinite(metrics["distill/reverse_kl"]) and metrics["distill/reverse_kl"] != 0
    # the rollout view shows the teacher's logprob of every token the student sampled, beside the sampler's
    train = [r["rollout_id"] for r in Client(collector).queued_rollouts(limit=100) if r["mode"] == "train"]
    assert len(train) == 16
    for rollout_id in train:
        view = httpx.get(f"{collector}/v1/ui/rollouts/{rollout_id}", timeout=30).json()
        (call,) = [call for call in view["calls"] if call["decision"]["selected"]]
        teacher, sampled = call["teacher_logprobs"], call["response_logprobs"]
        assert len(teacher) == len(sampled) == len(call["response_token_ids"]) > 0
        assert teacher != pytest.approx(sampled, abs=1e-3)  # the context moved them


def test_a_teacher_model_must_read_the_students_tokens(tiny_model_dir: Path, tmp_path: Path) -> None:
    engine = agl.LocalEngine(tiny_model_dir, rank=4, seed=0)
    frozen = teacher_sampler(tiny_model_dir, engine)  # the base model as a frozen teacher: the same tokenizer
    ids = engine.chat_tokenizer.encode("Question number 3? Paris")
    with torch.no_grad():
        expected = torch.log_softmax(frozen._replica.model(input_ids=torch.tensor([ids])).logits[0, :-1], -1)
    assert frozen.compute_logprobs(ids)[1:] == pytest.approx([expected[i, t].item() for i, t in enumerate(ids[1:])],
                                                            abs=1e-5)  # fmt: skip
    with pytest.raises(FileNotFoundError, match="not a model folder"):
        teacher_sampler(tmp_path, engine)


class TextOnly(agl.Backend):
    name = "text-only"

    def update(self, samples, step):  # pragma: no cover - never reached
        return {}


def test_a_backend_that_cannot_score_token_ids_refuses_distillation() -> None:
    options = agl.TrainingOptions(distillation=agl.Distillation(context="{answer}"))
    with pytest.raises(ValueError, match="on-policy distillation trains with the tinker backend, not text-only"):
        agl.TrainingLoop(TextOnly(), options)
