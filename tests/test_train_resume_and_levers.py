"""`lightning-otel train` as a user types it, with the tiny model, continued: a killed run resumed with the same
command and `--resume`, a resumed run judged on all its steps, self-distillation from the command line, a policy per
agent leaving a model folder each. (A file apart from tests/test_train_front_door.py, whose helpers it uses, so the
suite's two workers share the front door's runs.)"""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_train_front_door import AGENTS, short_run, tasks, train

__all__ = ["tasks"]  # the module's fixture, used here


def test_a_resumed_run_is_judged_on_every_step_of_the_run_not_only_those_since_its_checkpoint(tasks: Path, tmp_path):
    run = tmp_path / "flat-resumed"
    flags = short_run(tasks, run, "--algorithm", "tinker", "--save-every", "1")
    flags[flags.index(f"{AGENTS}:shout")] = f"{AGENTS}:flat"
    flags[flags.index("--steps") + 1] = "1"
    first = train(*flags, cwd=tmp_path)
    assert first.returncode == 1 and "FAILED: no training step of 1 had a trainable sample" in first.stderr
    flags[flags.index("--steps") + 1] = "2"
    again = train(*flags, "--resume", cwd=tmp_path)  # one more step that ties: the loop only warns, the CLI fails
    assert again.returncode == 1, again.stdout[-3000:] + again.stderr[-3000:]
    assert "FAILED: no step of the run trained, before or after resuming" in again.stderr
    assert "trained 0 of 2 steps" in again.stdout and "model:    none written" in again.stdout


def test_self_distillation_from_the_command_line_scores_every_sampled_token(tasks: Path, tmp_path: Path) -> None:
    run = tmp_path / "distilled"
    flags = ("--algorithm", "tinker", "--agent-match", "writer", "--distill-context", "Shout the word {word}.")
    done = train(*short_run(tasks, run, *flags), cwd=tmp_path)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "distill/samples" in line]
    assert len(steps) == 2 and all(step["distill/samples"] == step["training/samples"] > 0 for step in steps)
    assert all(step["distill/tokens"] > 0 and step["train/constant_groups"] == 0 for step in steps)


def test_a_teacher_check_whose_teacher_is_no_better_stops_the_run_before_it_trains(tasks: Path, tmp_path: Path):
    run = tmp_path / "checked"
    context = ("--distill-context", "The word is {word}.", "--teacher-check")
    flags = short_run(tasks, run, "--algorithm", "tinker", *context)
    flags[flags.index(f"{AGENTS}:shout")] = f"{AGENTS}:flat"  # every reward 0: student and teacher tie
    done = train(*flags, cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    said = (
        "FAILED: teacher check, the validation tasks x 2 at the training sampling: mean reward student 0.000, "
        "teacher (the policy with 'The word is {word}.') 0.000. The teacher is not the better policy"
    )
    assert said in done.stderr  # the recipe's 2 sampled answers a task, as its sampled validation
    assert "trained 0 of" in done.stdout and "model:    none written" in done.stdout
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    val_tasks = len((tasks / "val.jsonl").read_text().splitlines())
    assert [line["step"] for line in lines] == [0] and lines[0]["teacher_check_teacher/rollouts"] == 2 * val_tasks
    no_val = [flag for flag in flags if flag not in ("--val", str(tasks / "val.jsonl"))]
    refused = train(*no_val, cwd=tmp_path)
    assert refused.returncode == 2 and "--teacher-check answers the held-out tasks" in refused.stderr


def test_a_policy_per_agent_leaves_a_model_folder_per_policy(tasks: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    run = tmp_path / "policies"
    done = train(*short_run(tasks, run, "--policy", "writer=writer", "--policy", "check=checker"), cwd=tmp_path)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]
    assert "policies       writer <- agents matching 'writer', checker <- agents matching 'check'" in done.stdout
    for policy in ("writer", "checker"):
        info = json.loads((run / "model" / policy / "export.json").read_text())
        assert info["policy"] == policy and info["kind"] == "LoRA adapter, merged"
        assert AutoModelForCausalLM.from_pretrained(run / "model" / policy).config.vocab_size > 0
    done = train(*short_run(tasks, tmp_path / "x", "--policy", "w=writer", "--algorithm", "dpo"), cwd=tmp_path)
    assert done.returncode == 2 and "--policy: a policy per agent trains with --algorithm tinker" in done.stderr


def test_a_killed_run_resumes_after_its_latest_checkpoint_with_the_same_command_and_resume(tasks: Path, tmp_path):
    run = tmp_path / "runs" / "resumed"
    first = train(*short_run(tasks, run, "--algorithm", "tinker", "--agent-match", "writer", "--save-every", "1"),
                  cwd=tmp_path)  # fmt: skip
    assert first.returncode in (0, 3), first.stdout[-3000:] + first.stderr[-3000:]
    (run / "model").rename(tmp_path / "first_model")  # what a run killed before its end would not have written
    flags = short_run(tasks, run, "--algorithm", "tinker", "--agent-match", "writer", "--save-every", "1")
    again = train(*[flag if flag != "2" or index != flags.index("--steps") + 1 else "3"  # --steps 3: one more
                    for index, flag in enumerate(flags)], "--resume", cwd=tmp_path)  # fmt: skip
    assert again.returncode in (0, 3), again.stdout[-3000:] + again.stderr[-3000:]
    assert "resumed        after the latest checkpoint" in again.stdout
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [line["step"] for line in lines if "training/samples" in line]
    assert trained == [1, 2, 3]  # the first start's two steps, then only the third
    settings = json.loads((run / "settings.json").read_text())
    assert settings["plan"]["steps"] == 2 and len(settings["resumed"]) == 1  # the first start's, and the resume
    assert (run / "checkpoints" / "step-3").is_dir() and (run / "model" / "config.json").is_file()
    refused = train(*short_run(tasks, tmp_path / "nothing-here", "--resume"), cwd=tmp_path, timeout=120)
    assert refused.returncode == 2 and "holds no run" in refused.stderr
