"""The trained policy as a Hugging Face folder: a LoRA adapter merged into its base, the output layer untied when the
adapter trained it (a tied model's embeddings stay the base's), the folder loading with transformers and computing
what the adapter computed; a verl checkpoint's full weights copied; what is not a checkpoint refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lightning_otel.runs.model_export import NotACheckpoint, export_model, latest_checkpoint
from lightning_otel.training.tinker.local_engine import LocalEngine


def trained_engine(model_dir: Path, log_dir: Path) -> LocalEngine:
    engine = LocalEngine(model_dir, rank=4, seed=3, log_dir=log_dir)  # every projection and the output layer
    with torch.no_grad():
        for name, parameter in engine.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.2)
    return engine


def logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def test_an_adapter_is_merged_into_a_folder_that_computes_what_the_adapter_did(tiny_model_dir: Path,
                                                                               tmp_path: Path) -> None:  # fmt: skip
    engine = trained_engine(tiny_model_dir, tmp_path / "run")
    engine.save_state("step-2")
    engine.save_state("step-10")
    assert latest_checkpoint(tmp_path / "run").name == "step-10"  # by number, not by name
    ids = [1, 5, 9, 14, 3]
    engine.model.eval()
    expected = logits(engine.model, ids)
    out = export_model(tmp_path / "run", tmp_path / "model", about={"run_id": "r"})  # the run: its latest
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert torch.allclose(logits(merged, ids), expected, atol=1e-4)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert base.config.tie_word_embeddings and not merged.config.tie_word_embeddings  # untied: lm_head trained
    assert torch.equal(merged.get_input_embeddings().weight, base.get_input_embeddings().weight)
    assert not torch.equal(merged.lm_head.weight, base.lm_head.weight)
    info = json.loads((out / "export.json").read_text())
    assert info["untied_output_layer"] and info["run_id"] == "r" and info["kind"] == "LoRA adapter, merged"
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(Path(tiny_model_dir).resolve())
    assert not (out / "adapter" / "optimizer.pt").exists()
    tokenizer = AutoTokenizer.from_pretrained(out)  # with its chat template: the folder serves as it is
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)


def test_a_verl_checkpoint_with_its_hf_model_is_copied(tiny_model_dir: Path, tmp_path: Path) -> None:
    hf = tmp_path / "global_step_3" / "actor" / "huggingface"
    hf.parent.mkdir(parents=True)
    AutoModelForCausalLM.from_pretrained(tiny_model_dir).save_pretrained(hf)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(hf)
    out = export_model(tmp_path, tmp_path / "model")
    assert json.loads((out / "export.json").read_text())["kind"] == "verl checkpoint (its hf_model)"
    assert AutoModelForCausalLM.from_pretrained(out).config.vocab_size > 0


def test_what_is_no_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotACheckpoint, match="does not exist"):
        export_model(tmp_path / "missing", tmp_path / "out")
    with pytest.raises(NotACheckpoint, match="not a LoRA adapter"):
        export_model(tmp_path, tmp_path / "out")
