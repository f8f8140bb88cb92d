"""The SQL learning run's figures: its validations' answers split by the order they ran (greedy, then sampled, for
the warm start and then the end), the sampled accuracy pooled over seeds beside the greedy one, and the gain paired
by question."""

from __future__ import annotations

import argparse
import json

import pytest
from train_sql_smollm2 import read_records, validation_shares

from benchmarks.sql_learning import against_lines, by_question, one_run, paired_line, sampled_line, summary


def answers(outcomes: str) -> list[dict[str, str]]:
    names = {"r": "right", "w": "wrong", "x": "refused"}
    return [{"outcome": names[letter]} for letter in outcomes]


def test_each_validation_is_split_into_its_greedy_and_sampled_answers() -> None:
    # 2 questions, 2 samples each: the warm start's greedy (2), its sampled (4), then the end's
    records = answers("rw" + "wwxr" + "rr" + "rrrw")
    shares = validation_shares(records, 2, 2)
    assert shares["warm"]["right"] == 0.5 and shares["after"]["right"] == 1.0
    assert shares["warm_sampled"]["right"] == 0.25 and shares["warm_sampled"]["refused"] == 0.25
    assert shares["after_sampled"]["right"] == 0.75 and shares["after_sampled"]["questions"] == 4
    assert "warm_sampled" not in validation_shares(answers("rwrr"), 2, 0)  # greedy only


def test_the_sampled_accuracy_is_pooled_over_the_seeds_by_answers() -> None:
    runs = [
        {"seed": 0, "val_sampled": 2, **validation_shares(answers("rw" + "wwwr" + "rr" + "rrww"), 2, 2)},
        {"seed": 1, "val_sampled": 2, **validation_shares(answers("rw" + "wwww" + "rr" + "rrrr"), 2, 2)},
    ]
    line = sampled_line(runs)
    assert "seed 0 0.250 -> 0.500; seed 1 0.000 -> 1.000" in line
    assert "pooled 0.125 -> 0.750 (+0.625" in line


def test_an_attempt_run_again_counts_once_with_the_outcome_of_its_last_attempt(tmp_path) -> None:
    """An attempt stopped and run again (a loaded machine) wrote its record too: 63 records for 48 questions."""
    lines = [{"rollout_id": "a", "attempt_id": "at-1", "outcome": "refused"},
             {"rollout_id": "b", "attempt_id": "at-1", "outcome": "right"},
             {"rollout_id": "a", "attempt_id": "at-2", "outcome": "right"}]  # fmt: skip
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [(r["rollout_id"], r["outcome"]) for r in read_records(path)] == [("a", "right"), ("b", "right")]


def kept_answers(folder, questions: str, outcomes: str) -> None:
    """A run's val.episodes.jsonl: `outcomes` answer `questions` (one letter a question) in the order they ran."""
    names = {"r": "right", "w": "wrong", "x": "refused"}
    lines = [{"question": q, "outcome": names[o], "rollout_id": f"ro-{i}"}
             for i, (q, o) in enumerate(zip(questions, outcomes, strict=True))]  # fmt: skip
    folder.mkdir(parents=True)
    (folder / "val.episodes.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_gain_is_paired_by_question_and_its_error_counts_questions_not_answers(tmp_path) -> None:
    # 2 questions, 2 samples each; the sampled answers come back in any order: pairing goes by the question's text
    kept_answers(tmp_path / "seed-0", "ab" + "abba" + "ab" + "baab", "rw" + "wwxw" + "rr" + "rrwr")
    run = {"seed": 0, "val_questions": 2, "val_sampled": 2}
    pairs = by_question(run, tmp_path / "seed-0")
    assert pairs["greedy"] == {"a": (1.0, 1.0), "b": (0.0, 1.0)}
    assert pairs["sampled"] == {"a": (0.0, 0.5), "b": (0.0, 1.0)}  # a: w,x -> r,w; b: w,w -> r,r
    line = paired_line([{**run, "by_question": pairs}], "sampled")
    assert line.startswith("sampled, paired by question over 2 seed-questions: +0.750 +- 0.250 (+3.0 x")
    assert line.endswith("per seed 0 +0.750")
    assert paired_line([{**run, "by_question": {"greedy": {"a": (0.0, 1.0)}}}], "greedy") is None  # one unit
    unkept = {"seed": 3, "val_questions": 2, "val_sampled": 2, "by_question": by_question(run, tmp_path / "seed-3")}
    assert paired_line([{**run, "by_question": pairs}, unkept], "sampled").endswith("no kept answers: seed 3")
    other = {"seed": 4, "by_question": {"sampled": {"a": (0.0, 0.0), "b": (0.5, 0.75)}}}  # its mean gain: +0.125
    both = paired_line([{**run, "by_question": pairs}, other], "sampled")
    assert "per seed 0 +0.750, 4 +0.125 (their standard error 0.312: +1.4 x)" in both  # the seeds' spread


def test_the_teacher_checks_answers_are_not_paired_with_the_students(tmp_path) -> None:
    # greedy only (val_sampled 0): the check's student answers (a sample a question) then the teacher's come first
    kept_answers(tmp_path / "seed-1", "ab" + "ab" + "ab" + "ab", "wr" + "xx" + "rr" + "rw")
    run = {"seed": 1, "val_questions": 2, "val_sampled": 0, "teacher_check": {}}
    assert by_question(run, tmp_path / "seed-1") == {"greedy": {"a": (0.0, 1.0), "b": (1.0, 0.0)}, "sampled": {}}


def test_two_arms_are_compared_question_by_question_after_training() -> None:
    # the same seed's warm start (the before shares) in both arms; only the after shares are compared
    refill = {"seed": 0, "by_question": {"greedy": {"a": (0.0, 1.0), "b": (1.0, 1.0), "c": (0.0, 0.0)}}}
    dropped = {"seed": 0, "by_question": {"greedy": {"a": (0.0, 0.0), "b": (1.0, 1.0)}}}  # c: no kept answer
    (line,) = against_lines([refill], [dropped], "dropped/")
    assert line.startswith("greedy, against dropped/, paired by question over 2 seed-questions: +0.500 +- 0.500")
    assert against_lines([refill], [], "none/") == []  # no kept run to compare with: no line


def test_a_gain_without_spread_is_said_in_words() -> None:
    """A run whose every greedy answer stayed as it was (the same right and wrong questions): no ratio of 0 to 0."""
    unchanged = {"seed": 0, "by_question": {"greedy": {"a": (1.0, 1.0), "b": (0.0, 0.0)}}}
    line = paired_line([unchanged], "greedy")
    assert "+0.000 +- 0.000 (no change in any unit: 0 x its standard error)" in line and "inf" not in line


def test_the_greedy_figures_pool_the_accuracy_not_the_mean_reward() -> None:
    """With the three-level reward a validation's mean reward is right less refused (0.729 - 0.188 = 0.542 here): the
    pooled greedy lines say the share right, as the seed's row does."""
    shares = validation_shares(answers("r" * 35 + "x" * 9 + "w" * 4 + "r" * 39 + "x" * 3 + "w" * 6), 48, 0)
    rewards = [{"step": 0, "success": 0.542, "rollouts": 48}, {"step": 11, "success": 0.75, "rollouts": 48}]
    run = {"seed": 0, "val_questions": 48, "untrained": {"right": 0.042}, "complete": True, "trained_steps": 11,
           "train_reward": [0.0] * 11, "zero_variance_groups": 11, "groups": 44, "seconds": 1.0, **shares,
           "validations": rewards}  # fmt: skip
    lines, complete = summary([run], ties_allowed=False)
    assert complete
    assert "pooled warm start: final success 0.729" in "\n".join(lines)
    assert "pooled after training: final success 0.812" in "\n".join(lines)


def test_reuse_refuses_a_kept_run_of_other_settings_and_writes_nothing_over_it(tmp_path) -> None:
    """`--reuse` with other flags than a kept run's ran the seed again into the same folder, over its kept answers;
    it names what differs and stops. A run from before `steps` was kept counts its rewards."""
    kept = tmp_path / "seed-0" / "run.json"
    kept.parent.mkdir()
    kept.write_text(json.dumps({"model": "smollm2", "seed": 0, "val_questions": 48, "learning_rate": 1.3e-3,
                                "reward": "match", "train_reward": [0.5] * 11}))  # fmt: skip
    args = argparse.Namespace(workdir=tmp_path, model="smollm2", reuse=True, quick=False, example_flags=[])
    with pytest.raises(SystemExit, match=r"learning_rate 0\.0013 \(not 0\.00043\)") as refused:
        one_run(0, args)
    assert "steps 11 (not " in str(refused.value) and "reward" not in str(refused.value)
    assert [path.name for path in tmp_path.rglob("*")] == ["seed-0", "run.json"]  # nothing run, nothing written

    args.example_flags = ["--learning-rate", "1.3e-3", "--steps", "11"]  # its settings: its figures, as kept
    run = one_run(0, args)
    assert run["learning_rate"] == 1.3e-3 and run["by_question"] == {"greedy": {}, "sampled": {}}
