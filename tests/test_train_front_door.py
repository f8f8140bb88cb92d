"""`lightning-otel train` as a user types it, with the tiny model: each backend leaves a run folder (the trained model
as a Hugging Face folder that differs from its base, the metrics, the curve, a store `ui` and `export` open, the
settings with where each came from) and a verdict; what users trip on is said in one line. (verl's run folder: the
verl lane, tests/verl_lane/test_train_front_door_verl.py; resume, distillation and a policy per agent:
tests/test_train_resume_and_levers.py, a file of its own so the suite's two workers share the runs.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
AGENTS = "tests.programs.front_door_agents"
WORDS = ["orders", "revenue", "refunds", "budgets", "regions", "coupons", "reviews", "tickets"]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tasks")
    (folder / "train.jsonl").write_text("".join(json.dumps({"word": w}) + "\n" for w in WORDS[:6]))
    (folder / "val.jsonl").write_text("".join(json.dumps({"word": w}) + "\n" for w in WORDS[6:]))
    return folder


def train(*flags: str, cwd: Path, timeout: int = 420) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the runners import the agents from the tests' package
    command = [sys.executable, "-m", "lightning_otel.cli", "train", *flags]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def short_run(tasks: Path, run_dir: Path, *flags: str) -> list[str]:
    return ["--model", "tiny", "--agent", f"{AGENTS}:shout", "--train", str(tasks / "train.jsonl"),
            "--val", str(tasks / "val.jsonl"), "--steps", "2", "--tasks-per-step", "2", "--run-dir", str(run_dir),
            *flags]  # fmt: skip


def test_a_tinker_run_leaves_a_folder_with_its_model_metrics_curve_store_and_verdict(tasks: Path, tmp_path: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tmp_path / "runs" / "shout-1"
    done = train(*short_run(tasks, run, "--algorithm", "tinker", "--agent-match", "writer"), cwd=tmp_path)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]  # 3: trained, not improved
    out = done.stdout
    # the settings before anything starts, each with where it came from; the closing lines name everything
    assert "learning rate  0.01  [recipe tiny/tinker]" in out and "[--steps]" in out
    assert "the policy" in out and "greedy: " in out and "sampled at temperature 1: " in out
    assert f"model:    {run / 'model'}" in out and "ui " in out and str(run) in out
    settings = json.loads((run / "settings.json").read_text())
    assert settings["run_id"] == "shout-1" and settings["plan"]["sources"]["steps"] == "--steps"
    assert Path(settings["trained_from"]) == (run / "base_model").resolve()
    # the metrics, a line a step and the validations, under the run's id; the curve
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2] and {line["run"] for line in lines} == {"shout-1"}
    assert "val/reward_mean" in lines[0] and "val_sampled/reward_mean" in lines[-1]
    assert (run / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"
    verdict = json.loads((run / "verdict.json").read_text())
    assert [c["label"] for c in verdict["comparisons"]] == ["greedy", "sampled at temperature 1"]
    assert verdict["comparisons"][0]["tasks_before"] == 2
    # the model: a Hugging Face folder transformers loads and generates from, not the base's weights
    model = AutoModelForCausalLM.from_pretrained(run / "model")
    base = AutoModelForCausalLM.from_pretrained(run / "base_model")
    changed = [name for name, weight in model.state_dict().items() if not torch.equal(weight, base.state_dict()[name])]
    assert changed, "the exported model is the base model"
    tokenizer = AutoTokenizer.from_pretrained(run / "model")
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Say hi"}], add_generation_prompt=True,
                                           return_dict=True, return_tensors="pt")  # fmt: skip
    assert model.generate(**prompt, max_new_tokens=3, do_sample=False).shape[1] > prompt["input_ids"].shape[1]
    assert (run / "model" / "adapter" / "adapter_config.json").is_file()
    # the store: `export` (with the message text: content is recorded by default) and the rollout view open it
    exported = tmp_path / "sft.jsonl"
    done = subprocess.run([sys.executable, "-m", "lightning_otel.cli", "export", str(run), str(exported)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    assert rows and all(row["messages"] and row["run_id"] == "shout-1" for row in rows)
    assert_the_rollout_view_opens(run)


def assert_the_rollout_view_opens(run: Path) -> None:
    import httpx

    from tests.helpers import free_port

    port = free_port()
    view = subprocess.Popen([sys.executable, "-m", "lightning_otel.cli", "ui", str(run), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        line = view.stdout.readline() if view.stdout else ""
        assert f"http://127.0.0.1:{port}/ui" in line, line + (view.stderr.read() if view.stderr else "")
        assert "rollouts in" in line and str(run / "store.sqlite3") in line
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            runs = httpx.get(f"http://127.0.0.1:{port}/v1/ui/runs", timeout=5)
            if runs.status_code == 200:
                break
            time.sleep(0.2)
        assert "shout-1" in runs.text
    finally:
        view.terminate()
        view.wait(timeout=30)


def test_several_agents_and_no_agent_match_are_named_and_dpo_trains_a_model(tasks: Path, tmp_path: Path) -> None:
    run = tmp_path / "dpo-run"
    done = train(*short_run(tasks, run, "--algorithm", "dpo"), cwd=tmp_path)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "no agent_match: the calls of every agent are trained: checker (" in said and "writer (" in said
    assert (run / "model" / "config.json").is_file() and json.loads((run / "model" / "export.json").read_text())[
        "kind"] == "dpo output"  # fmt: skip


def test_dpo_that_found_no_pair_writes_no_model_and_fails(tasks: Path, tmp_path: Path) -> None:
    run = tmp_path / "flat"
    flags = short_run(tasks, run, "--algorithm", "dpo")
    flags[flags.index(f"{AGENTS}:shout")] = f"{AGENTS}:flat"
    done = train(*flags, cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "FAILED: no training step of 2 had a trainable sample" in done.stderr
    assert "no preference pair: 2 groups, 2 with every reward within 0.0 of the others" in done.stderr
    assert "model:    none written" in done.stdout
    assert not (run / "model").exists()  # no copy of the base model under the run's name


def test_sft_keeps_good_rollouts_and_measures_the_model_it_wrote(tasks: Path, tmp_path: Path) -> None:
    run = tmp_path / "sft"
    done = train(*short_run(tasks, run, "--algorithm", "sft", "--agent-match", "writer", "--min-reward", "0.05"),
                 cwd=tmp_path)  # fmt: skip
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    verdict = json.loads((run / "verdict.json").read_text())  # the base folder and the fine-tuned one, served alike
    assert [c["tasks_after"] for c in verdict["comparisons"]] == [2, 2]
    assert (run / "model" / "config.json").is_file() and (run / "model" / "sft_examples.jsonl").is_file()


def test_a_warm_start_fine_tunes_first_and_the_rl_steps_start_from_it(tasks: Path, tmp_path: Path) -> None:
    examples = tmp_path / "examples.jsonl"
    chat = [{"role": "user", "content": "Say orders in capitals"}, {"role": "assistant", "content": "ORDERS"}]
    examples.write_text("".join(json.dumps({"messages": chat}) + "\n" for _ in range(4)))
    run = tmp_path / "warm"
    done = train(*short_run(tasks, run, "--agent-match", "writer", "--warm-start", str(examples)), cwd=tmp_path)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    assert "warm start: 4 examples, 2 passes at 0.0001" in done.stdout
    settings = json.loads((run / "settings.json").read_text())
    assert Path(settings["trained_from"]) == (run / "warm_start" / "model").resolve()
    adapter = json.loads((run / "model" / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str((run / "warm_start" / "model").resolve())


def test_a_dry_run_serves_the_model_and_prints_what_each_agent_said(tasks: Path, tmp_path: Path) -> None:
    done = train("--dev", "--model", "tiny", "--agent", f"{AGENTS}:shout", "--train", str(tasks / "train.jsonl"),
                 "--n-tasks", "2", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "dry run against tiny" in done.stdout and "temperature 1, at most 16 reply tokens" in done.stdout
    said = [line for line in done.stdout.splitlines() if line.startswith(("writer: ", "checker: "))]
    assert len(said) == 4  # two rollouts, two calls each


def test_with_v_a_failing_agent_shows_its_traceback(tasks: Path, tmp_path: Path) -> None:
    flags = short_run(tasks, tmp_path / "broken", "--steps", "1", "-v", "--val-samples", "0")
    flags[flags.index(f"{AGENTS}:shout")] = f"{AGENTS}:broken"
    done = train(*flags, cwd=tmp_path)
    assert done.returncode == 1
    said = done.stdout + done.stderr
    assert "Traceback (most recent call last)" in said and "in parse_the_answer" in said
    assert "ValueError: cannot read a number from" in said


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--algorithm", "tinker", "trainer.save_freq=2"], "verl keys (--config, key=value) and --algorithm tinker"),
        (["--algorithm", "verl", "--lora-rank", "8"], "--lora-rank: the verl backend here trains every weight"),
        (["--steps", "0"], "--steps must be >= 1"),
        (["--group-size", "1"], "--group-size 1: tinker compares a task's rollouts"),
        (["--model", "no/such/folder"], "'no/such/folder' is neither a model name"),
        (["--warm-start", "BAD", "--warm-start-teacher", "http://127.0.0.1:9/v1"], "give one"),
        (["--algorithm", "verl", "--tasks-per-step", "2", "actor_rollout_ref.actor.ppo_mini_batch_size=8"],
         "data.train_batch_size (2) must be >= actor_rollout_ref.actor.ppo_mini_batch_size (8)"),
        (["--algorithm", "tinker", "--distill-context", "The word is {answer}"],
         "the teacher's context names ['answer'] but the task has only ['word']"),
        (["--algorithm", "dpo", "--distill-context", "The word is {word}"],
         "on-policy distillation (--distill-context, --teacher) trains with --algorithm tinker"),
        (["--distill-alone"],
         "--distill-weight, --distill-alone and --teacher-check need --distill-context or --teacher"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2_before_any_model_or_ray(tasks: Path, tmp_path: Path, flags: list[str],
                                                                   message: str) -> None:  # fmt: skip
    base = ["--agent", f"{AGENTS}:shout", "--train", str(tasks / "train.jsonl")]
    if "--model" not in flags:
        base += ["--model", "tiny"]
    began = time.monotonic()
    done = train(*base, *flags, "--run-dir", str(tmp_path / "run"), cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "run" / "store.sqlite3").exists() and time.monotonic() - began < 60


def test_a_bad_warm_start_row_and_a_used_run_folder_are_refused(tasks: Path, tmp_path: Path) -> None:
    examples = tmp_path / "examples.jsonl"
    examples.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
                                    "content": "HI"}]}) + "\n" + json.dumps({"messages": None}) + "\n")  # fmt: skip
    base = ["--model", "tiny", "--agent", f"{AGENTS}:shout", "--train", str(tasks / "train.jsonl")]
    done = train(*base, "--warm-start", str(examples), "--run-dir", str(tmp_path / "r"), cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "row 2 has no message text (recorded with --no-content?)" in done.stderr
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "store.sqlite3").write_bytes(b"")
    done = train(*base, "--run-dir", str(tmp_path / "used"), cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "already holds a run" in done.stderr
