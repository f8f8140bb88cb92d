"""examples/tinker's twenty-questions flow (CrewAI) as its README runs it: the dry run through Trainer.dev selects
only the player's calls, with the server's token ids; the evaluator appends one line per game."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "tinker"
sys.path.insert(0, str(EXAMPLE))
from q20_agent import names_the_secret  # noqa: E402


def test_a_guess_wins_only_when_it_names_the_secret() -> None:
    assert names_the_secret("Is it a penguin?", "penguin")
    assert names_the_secret("Are they Penguins?", "penguin")
    assert not names_the_secret("Is it a bird?", "penguin")
    assert not names_the_secret("Is it an oaken chest?", "oak")


def test_dryrun_trains_only_the_players_calls(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "q20_train.py", "dryrun", "--workdir", str(tmp_path)],
        cwd=EXAMPLE, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "dry run: 4 games, 12 samples, from agents ['player']" in done.stdout, done.stdout[-4000:]
    assert "agents seen ['answerer', 'player']" in done.stdout  # the answerer's calls were seen and left out
    assert "without token ids 0" in done.stdout


def test_evaluate_appends_one_line_per_game(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    for _ in range(2):  # a second run appends
        done = subprocess.run(
            [sys.executable, "q20_evaluate.py", "--model", "scripted", "--scripted", "--split", "train", "--limit",
             "2", "--max-turns", "3", "--output-file", str(results)],
            cwd=EXAMPLE, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    games = [json.loads(line) for line in results.read_text().splitlines()]
    assert [game["answer"] for game in games] == ["penguin", "elephant"] * 2
    assert [game["won"] for game in games] == [True, False] * 2  # the scripted player guesses "penguin"
    assert "won 1/2 (50.0%)" in done.stdout
