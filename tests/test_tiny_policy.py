"""The offline tokenizer and tiny policy that tests, the demo and the spider example train: what transformers loads
from their directory tokenizes exactly as they were built."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the tiny policy needs torch and transformers (not in the openai3 lane)")
from lightning_otel.testing.tokenizer import train_tokenizer

LINES = ["How many patients are there with city Paris?", "SELECT count(*) FROM patient WHERE city = 'Paris'"] * 40


def test_space_after_words_makes_a_quoted_value_the_same_token_as_in_the_question() -> None:
    tokenizer = train_tokenizer(LINES, vocab_size=400, space_after_words=True)
    question, sql = (tokenizer.encode(line) for line in LINES[:2])
    paris = tokenizer.encode("Paris")
    assert len(paris) == 1 and paris[0] in question and paris[0] in sql
    for text in (*LINES[:2], "  two  spaces\nand a line ", "<|im_start|>user\nhi<|im_end|>\n"):
        assert tokenizer.decode(tokenizer.encode(text)) == text
    gpt2_style = train_tokenizer(LINES, vocab_size=400)
    assert not set(gpt2_style.encode("Paris")) & set(gpt2_style.encode(" Paris"))  # the default keeps the space before


@pytest.mark.parametrize("architecture", ["qwen2", "llama"])
def test_the_saved_directory_loads_in_transformers(tmp_path: Path, architecture: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lightning_otel.testing.tiny_model import save_tiny_model

    tokenizer = train_tokenizer(LINES, vocab_size=400, space_after_words=True)
    path = save_tiny_model(tmp_path, hidden_size=32, layers=2, tokenizer=tokenizer, architecture=architecture)
    loaded = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.model_type == architecture and model.config.vocab_size == tokenizer.vocab_size
    same = [loaded.encode(line, add_special_tokens=False) == tokenizer.encode(line) for line in LINES[:2]]
    # transformers 5 loads a qwen2 directory's tokenizer with Qwen2's own pre-tokenizer: only llama keeps ours
    assert all(same) if architecture == "llama" else not all(same)


def test_an_unknown_architecture_is_refused() -> None:
    from lightning_otel.testing.tiny_model import tiny_policy

    with pytest.raises(ValueError, match="architecture must be 'qwen2' or 'llama'"):
        tiny_policy(train_tokenizer(LINES, vocab_size=300), architecture="gpt2")


def test_model_or_tiny_builds_the_tiny_model_once_and_passes_a_folder_through(tmp_path: Path) -> None:
    from lightning_otel.testing import model_or_tiny

    tiny = model_or_tiny("tiny", tmp_path, seed=3)
    assert tiny == tmp_path / "model-tiny-3" and (tiny / "config.json").exists()
    built = (tiny / "model.safetensors").stat().st_mtime_ns
    assert model_or_tiny("tiny", tmp_path, seed=3) == tiny
    assert (tiny / "model.safetensors").stat().st_mtime_ns == built  # reused, not rebuilt
    assert model_or_tiny(str(tiny), tmp_path / "elsewhere") == tiny  # a folder is itself
    with pytest.raises(FileNotFoundError, match="neither a model name"):
        model_or_tiny(str(tmp_path / "missing"), tmp_path)
