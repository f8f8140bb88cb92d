"""`agl.DPO` on the training loop (runner processes, the gateway, a real collector, TRL's DPOTrainer on the tiny
model) and `agl.dpo_from_pairs` on exported pairs: the pairs trained are the ones `lightning-otel export` forms
from the same store, the policy served changes version after each trained step, DPO moves the chosen reply's
likelihood over the rejected one's, a run without a pair says so, and another TRL release is refused."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import lightning_otel as agl
from lightning_otel import semconv
from lightning_otel.collector import Client, CollectorConfig, EmbeddedCollector
from lightning_otel.runtime.sample_diagnosis import NothingTrained
from tests.helpers import assert_staleness_by_the_spans

TASKS = [{"task_id": f"t{i}", "question": f"Question number {i}?"} for i in range(4)]
TOKEN_PAIRS = [{"prompt_token_ids": [5, 6, 7, 8 + k], "chosen_token_ids": [20 + k, 21, 22],
                "rejected_token_ids": [40 + k, 41]} for k in range(8)]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lightning_otel.testing.tiny_model import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("dpo-base") / "tiny")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    path = tmp_path / "c.sqlite3"
    config = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=f"sqlite:///{path}")
    with EmbeddedCollector(config) as addresses:
        yield addresses.query, path


def _dpo(model_dir: Path, out: Path | None, steps: int, **options) -> agl.DPO:
    settings = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=2, group_size=4, max_steps=steps), sampling=agl.Sampling(max_tokens=8),
        trackers=agl.Trackers(logger=()), **options,
    )  # fmt: skip
    return agl.DPO(model_dir, out, settings, learning_rate=1e-3)


def test_online_dpo_trains_the_exported_pairs_and_serves_each_new_policy(tiny_model_dir, store, tmp_path) -> None:
    collector, path = store
    trainer = agl.Trainer(n_runners=2, collector=collector, algorithm=_dpo(tiny_model_dir, tmp_path / "out", 3))
    result = trainer.fit("tests.tinker.agents:short_answer_agent", TASKS, TASKS[:2])
    assert isinstance(result, agl.TrainingResult) and len(result.steps) == 3
    metrics = [record.metrics for record in result.steps]
    trained = [step for step in metrics if step["dpo/pairs"] > 0]
    assert trained, metrics  # sampled answers of different lengths: groups with a reward spread
    assert result.final["dpo/total_pairs"] == sum(step["dpo/pairs"] for step in metrics)
    assert all(step["dpo/prompts_differ"] == 0 for step in metrics)  # one call a rollout: the task's prompt
    # each step published its version (the step after which the weights were published); the next step's LLM spans
    # name the version that sampled them
    versions = [step["training/policy_version"] for step in metrics]
    assert versions == [0.0, 1.0, 2.0]
    client = Client(collector)
    last = result.steps[-1]
    spans = client.rollouts_spans(last.rollout_ids)
    sampled = {s["attributes"].get(semconv.AGL_POLICY_VERSION) for spans_ in spans.values() for s in spans_
               if s["attributes"].get(semconv.GEN_AI_OPERATION_NAME) == "chat"}  # fmt: skip
    assert sampled == {int(versions[-1])}
    # the pairs each step trained are the ones the export forms from the same store, step by step
    run_id = client.rollout(last.rollout_ids[0])["metadata"]["run_id"]
    for number, step in enumerate(metrics, start=1):
        report = agl.export_dataset(path, tmp_path / f"pairs-{number}.jsonl", shape="pairs", run_id=run_id,
                                    step=number, mode="train", progress=False)  # fmt: skip
        assert report.rows == step["dpo/pairs"], (number, report.summary())
    # the saved model is the trained one: it loads, and differs from the start
    from transformers import AutoModelForCausalLM

    start = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    end = AutoModelForCausalLM.from_pretrained(tmp_path / "out").state_dict()
    assert any(not torch.equal(start[name], end[name]) for name in start)


def test_a_run_whose_groups_never_differ_trains_nothing_and_says_why(tiny_model_dir, store) -> None:
    collector, _ = store
    trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=_dpo(tiny_model_dir, None, 2))
    with pytest.raises(NothingTrained, match="no preference pair"):
        trainer.fit("tests.tinker.agents:constant_agent", TASKS[:2])


def _log_ratio(model, prompt: list[int], chosen: list[int], rejected: list[int]) -> float:
    def logp(reply: list[int]) -> float:
        ids = torch.tensor([prompt + reply])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1]
        return float(torch.log_softmax(logits, -1).gather(1, torch.tensor(reply)[:, None]).sum())

    return logp(chosen) - logp(rejected)


@pytest.mark.parametrize("lora", [None, {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}])
def test_offline_dpo_from_exported_pairs_prefers_the_chosen_replies(tiny_model_dir, tmp_path, lora) -> None:
    from transformers import AutoModelForCausalLM

    pairs = [dict(pair) for pair in TOKEN_PAIRS]
    pairs.append({"prompt_token_ids": None, "chosen_token_ids": [1], "rejected_token_ids": [2]})  # no ids: left out
    before = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    stats = agl.dpo_from_pairs(pairs, tiny_model_dir, tmp_path / "out", lora=lora, learning_rate=5e-3, epochs=5,
                               batch_size=4)  # fmt: skip
    assert (stats.pairs, stats.pairs_without_token_ids) == (8, 1) and stats.losses
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "out")  # a plain model (LoRA merged)
    gains = [_log_ratio(after, p["prompt_token_ids"], p["chosen_token_ids"], p["rejected_token_ids"])
             - _log_ratio(before, p["prompt_token_ids"], p["chosen_token_ids"], p["rejected_token_ids"])
             for p in pairs[:8]]  # fmt: skip
    assert min(gains) > 0, gains
    assert stats.losses[-1] < stats.losses[0]


def test_lora_dpo_trains_step_after_step_against_the_base_model(tiny_model_dir) -> None:
    """The loop calls DPO once a step on the same LoRA model: the second call trains (TRL's copied "ref" adapter
    made it fail), and its reference is still the base model, not the policy the first call left (against that, the
    second call's first loss would be ln 2 exactly: the policy equals its reference)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lightning_otel.training.dpo.backend import lora_model
    from lightning_otel.training.dpo.trl_dpo import train_dpo

    model = lora_model(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]},
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    pairs = [dict(pair) for pair in TOKEN_PAIRS]
    first = train_dpo(model, tokenizer, pairs, learning_rate=5e-3, epochs=3, batch_size=8)
    second = train_dpo(model, tokenizer, pairs, learning_rate=5e-3, epochs=1, batch_size=8)
    assert first.losses[0] == pytest.approx(math.log(2), abs=1e-4)  # a fresh adapter: the policy is its reference
    assert second.losses[0] < first.losses[-1] + 1e-6 and abs(second.losses[0] - math.log(2)) > 1e-3, (first, second)
    assert list(model.peft_config) == ["default"]


def test_another_trl_release_is_refused_with_the_install_line(monkeypatch, tiny_model_dir, tmp_path) -> None:
    from lightning_otel.training.dpo import trl_dpo

    monkeypatch.setattr(trl_dpo, "is_tested", lambda distribution: False)
    pair = {"prompt_token_ids": [5, 6], "chosen_token_ids": [7], "rejected_token_ids": [8]}
    with pytest.raises(RuntimeError, match=r"pip install 'trl>=0.29,<0.30'"):
        agl.dpo_from_pairs([pair], tiny_model_dir, tmp_path / "out")
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        agl.DPO(tiny_model_dir, options=agl.TrainingOptions(schedule=agl.Schedule(group_size=1)))


def test_asynchronous_dpo_trains_samples_within_the_bound_by_the_spans_versions(tiny_model_dir, store) -> None:
    """`max_staleness=1` on the DPO backend (its CPU replica serves while TRL trains): no trained sample is more than
    one version behind the policy trained, by the versions the replica named on the spans, and the step's
    `async/staleness_max` is what the spans say."""
    collector, _ = store
    algorithm = _dpo(tiny_model_dir, None, 3, max_staleness=1)
    trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=algorithm, progress=False)
    result = trainer.fit("tests.tinker.agents:short_answer_agent", TASKS)
    assert len(result.steps) == 3
    assert_staleness_by_the_spans(collector, result.steps, max_staleness=1)
