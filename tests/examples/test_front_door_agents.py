"""The front door's agents' rewards and tool (examples/front_door): what they pay for, and the loopholes a
policy found in their first versions paying nothing ("routerrouterrouter" was a six-word slogan)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "front_door"))
import make_tasks
from antonyms import antonym_reward
from inventory import stock
from reviews import label_reward
from slogans import slogan_reward


@pytest.mark.parametrize(
    ("reply", "reward"),
    [("Cold.", 1.0), ("cold", 1.0), ('The opposite of "hot" is "cold".', 0.5 + 0.5 / 6), ("It is cold", 0.5 + 0.5 / 3),
     ("warm", 0.0), ("", 0.0)],
)  # fmt: skip
def test_the_antonym_reward_pays_the_bare_opposite_most(reply: str, reward: float) -> None:
    assert antonym_reward(reply, ["cold"]) == pytest.approx(reward)


@pytest.mark.parametrize(
    ("slogan", "reward"),
    [("Router: connect faster", 1.0), ("The router that never sleeps at all tonight", 0.5),
     ("Fast and reliable", 0.5), ('"routerrouterrouterrouterrouterrouterrouter', 0.0), ("router router router", 0.0),
     ("lamp router", 1.0)],
)  # fmt: skip
def test_the_slogan_reward_pays_a_short_slogan_naming_the_product(slogan: str, reward: float) -> None:
    assert slogan_reward(slogan, "router") == reward


def test_the_stock_is_the_same_every_time_and_case_blind() -> None:
    assert stock("bolts", "north") == stock(" Bolts", "NORTH ") and 10 <= stock("bolts", "north") < 1000
    assert stock("bolts", "north") != stock("bolts", "south")


@pytest.mark.parametrize(
    ("reply", "reward"),
    [("Positive", 1.0), ("positive.", 1.0), ("The review is positive.", 0.5 + 0.5 / 4), ("Negative", 0.0),
     ("Positive or negative", 0.0), ("", 0.0)],
)  # fmt: skip
def test_the_review_reward_pays_the_bare_label_most_and_never_both(reply: str, reward: float) -> None:
    assert label_reward(reply, "positive") == pytest.approx(reward)


def test_the_committed_task_files_are_what_make_tasks_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    committed = make_tasks.TASKS
    monkeypatch.setattr(make_tasks, "TASKS", tmp_path)
    make_tasks.main()
    written = sorted(path.name for path in tmp_path.iterdir())
    assert written == sorted(path.name for path in committed.glob("*.jsonl"))
    for name in written:
        assert (tmp_path / name).read_text() == (committed / name).read_text(), name


def test_no_held_out_review_uses_a_phrase_of_the_training_reviews() -> None:
    def phrases(split: str) -> set[str]:
        rows = (make_tasks.TASKS / f"reviews_{split}.jsonl").read_text().splitlines()
        return {row.split('"review": "This ', 1)[1].split(" ", 1)[1] for row in rows}

    assert not phrases("train") & phrases("val")
