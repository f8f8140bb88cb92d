"""The SQL learning run's figures: its validations' answers split by the order they ran (greedy, then sampled, for
the warm start and then the end), and the sampled accuracy pooled over seeds beside the greedy one."""

from __future__ import annotations

import json

from train_sql_smollm2 import read_records, validation_shares

from benchmarks.sql_learning import sampled_line


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
