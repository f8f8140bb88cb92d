"""`lightning-otel train --algorithm verl` with the tiny model: the run folder a user gets (verl's checkpoint saves the
full weights, which become the run's Hugging Face model folder), as the main suite checks it for Tinker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.test_train_front_door import assert_the_rollout_view_opens, short_run, tasks, train

__all__ = ["tasks"]  # the task files' fixture


def test_a_verl_run_leaves_a_model_folder_and_a_store_ui_and_export_open(tasks: Path, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "shout-1"
    done = train(*short_run(tasks, run, "--algorithm", "verl", "--agent-match", "writer"), cwd=tmp_path, timeout=600)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    assert "backend        verl  [--algorithm]" in done.stdout and "[recipe tiny/verl]" in done.stdout
    assert (run / "checkpoints" / "global_step_2" / "actor" / "huggingface").is_dir()
    info = json.loads((run / "model" / "export.json").read_text())
    assert info["kind"] == "verl checkpoint (its hf_model)" and info["run_id"] == "shout-1"
    model = AutoModelForCausalLM.from_pretrained(run / "model")
    base = AutoModelForCausalLM.from_pretrained(run / "base_model")
    assert next(model.parameters()).dtype == torch.float32  # the dtype the CPU actor trained in
    assert any(not torch.equal(weight, base.state_dict()[name]) for name, weight in model.state_dict().items())
    tokenizer = AutoTokenizer.from_pretrained(run / "model")
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Say hi"}], add_generation_prompt=True,
                                           return_dict=True, return_tensors="pt")  # fmt: skip
    assert model.generate(**prompt, max_new_tokens=3, do_sample=False).shape[1] > prompt["input_ids"].shape[1]
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2] and "val_sampled/reward_mean" in lines[0]
    assert (run / "reward_curve.png").is_file() and json.loads((run / "verdict.json").read_text())["comparisons"]
    exported = tmp_path / "rows.jsonl"
    done = subprocess.run([sys.executable, "-m", "lightning_otel.cli", "export", str(run), str(exported)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert all(json.loads(line)["messages"] for line in exported.read_text().splitlines())
    assert_the_rollout_view_opens(run)
