"""DPO, SFT and a reward model on SmolLM2-135M-Instruct (a Llama, its own tokenizer and chat template): each trains
on it from the traces (DPO: LoRA adapters on the calls its CPU replica sampled, token ids as recorded; SFT: the
calls' messages through SmolLM2's template; the reward model: a one-label head on it), one short step each."""

from __future__ import annotations

import json
from pathlib import Path

import lightning_otel as agl
from lightning_otel.testing import OpenAITestServer
from tests.models.smollm2_calls import TASKS, checked_calls, one_step

ONE_STEP = agl.Schedule(batch_size=2, group_size=2, max_steps=1, val_every=0)
QUIET = agl.Trackers(logger=())


def test_dpo_trains_lora_adapters_on_smollm2_from_the_pairs_of_its_sampled_calls(smollm2_dir: Path, tmp_path) -> None:
    options = agl.TrainingOptions(schedule=ONE_STEP, sampling=agl.Sampling(max_tokens=8), trackers=QUIET)
    algorithm = agl.DPO(smollm2_dir, None, options, learning_rate=1e-4, batch_size=2,
                        lora={"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]})  # fmt: skip
    step, spans = one_step(algorithm, tmp_path)
    assert len(checked_calls(spans, smollm2_dir)) == 4
    if step.skipped_because:  # both groups' answers alike: said why, and nothing was trained
        assert "no preference pair" in step.skipped_because[0]
    else:
        assert step.metrics["dpo/pairs"] >= 1 and step.metrics["dpo/loss"] > 0


def test_sft_fine_tunes_smollm2_on_the_teachers_calls_through_its_template(smollm2_dir: Path, tmp_path) -> None:
    replies = {"What is 2 + 3?": "5", "Name a colour.": "Blue"}
    with OpenAITestServer(replies=lambda body: replies[body["messages"][-1]["content"]]) as teacher:
        trainer = agl.Trainer(
            n_runners=1, progress=False,
            algorithm=agl.SFT(smollm2_dir, tmp_path / "sft", agl.TrainingOptions(trackers=QUIET), min_reward=0.0,
                              epochs=2, learning_rate=1e-4, batch_size=2, max_length=128,
                              trl_args={"logging_steps": 1}),
            initial_resources={"main_llm": agl.LLM(teacher.base_url, "teacher")},
        )  # fmt: skip
        result = trainer.fit("tests.tinker.agents:short_answer_agent", TASKS)
    assert result.final["sft/examples"] == 2 and result.final["sft/last_loss"] < result.final["sft/first_loss"]
    examples = [json.loads(line) for line in (tmp_path / "sft" / "sft_examples.jsonl").read_text().splitlines()]
    assert sorted(e["messages"][-1]["content"] for e in examples) == ["5", "Blue"]
    from transformers import AutoModelForCausalLM

    assert type(AutoModelForCausalLM.from_pretrained(tmp_path / "sft")).__name__ == "LlamaForCausalLM"


def test_a_reward_model_trains_on_smollm2s_base(smollm2_dir: Path, tmp_path: Path) -> None:
    from lightning_otel.training.reward_model.train import train_reward_model

    def pair(question: str, good: str, bad: str) -> dict:
        prompt = [{"role": "user", "content": question}]
        return {"prompt": prompt, "chosen": [{"role": "assistant", "content": good}],
                "rejected": [{"role": "assistant", "content": bad}]}  # fmt: skip

    rows = [pair(f"What is {a} + {a}?", str(2 * a), f"I do not know {a}") for a in range(8)]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = train_reward_model(smollm2_dir, pairs, tmp_path / "rm", epochs=1, batch_size=4, lora=True,
                                lora_rank=4, max_length=64, heldout_fraction=0.25)  # fmt: skip
    assert result.train_pairs == 6 and result.heldout_pairs == 2 and result.losses
    assert all(loss == loss for loss in result.losses)  # finite, not NaN


def test_dpo_refuses_lora_on_smollm2s_tied_output_layer(smollm2_dir: Path) -> None:
    """DPO serves its policy merged; merging an adapter on SmolLM2's lm_head (tied to its embeddings) would move the
    embeddings too, so the replica would sample from weights no step trained: refused, with what to do."""
    import pytest
    import torch
    from transformers import AutoModelForCausalLM

    from lightning_otel.training.dpo.backend import TiedOutputLayer, lora_model, plain_weights

    with pytest.raises(TiedOutputLayer, match="Leave lm_head out of target_modules"):
        lora_model(AutoModelForCausalLM.from_pretrained(smollm2_dir), {"r": 4, "target_modules": ["q_proj", "lm_head"]})
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    embeddings = model.get_input_embeddings().weight.detach().clone()
    adapted = lora_model(model, {"r": 4, "target_modules": ["q_proj", "v_proj"], "init_lora_weights": False})
    assert torch.equal(plain_weights(adapted)["model.embed_tokens.weight"], embeddings)  # served as trained
