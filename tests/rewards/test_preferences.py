"""`reward-model convert`: raw rated answers in three shapes -> TRL preference rows; malformed lines are errors
naming their line, and nothing is written unless they are skipped on purpose (counted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_otel.training.reward_model.preferences import BadPreferenceLine, convert, pairs_of


def test_the_three_input_shapes() -> None:
    (pair,) = pairs_of({"question": "q?", "chosen": "good", "rejected": "bad"}, 1)
    assert pair == {
        "prompt": [{"role": "user", "content": "q?"}],
        "chosen": [{"role": "assistant", "content": "good"}],
        "rejected": [{"role": "assistant", "content": "bad"}],
    }
    lists = pairs_of({"prompt": "q?", "chosen": ["a", "b"], "rejected": ["c", "d", "e"]}, 1)
    assert len(lists) == 6 and {p["chosen"][0]["content"] for p in lists} == {"a", "b"}
    rated = pairs_of(
        {
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q?"}],
            "answers": [{"text": "ok", "score": 2}, {"answer": "best", "rating": 5}, {"content": "meh", "score": 2}],
        },
        1,
        with_margin=True,
    )
    assert [(p["chosen"][0]["content"], p["rejected"][0]["content"], p["margin"]) for p in rated] == [
        ("best", "ok", 3.0),
        ("best", "meh", 3.0),
    ]  # equal scores give no pair
    assert rated[0]["prompt"][0] == {"role": "system", "content": "s"}


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ([1, 2], "not a JSON object"),
        ({"chosen": "a", "rejected": "b"}, "no question"),
        ({"question": "q", "chosen": "a"}, "no answers"),
        ({"question": "q", "chosen": "", "rejected": "b"}, '"chosen" must be'),
        ({"question": "q", "chosen": "a", "rejected": ["a"]}, "both chosen and rejected"),
        ({"question": "q", "answers": [{"text": "a", "score": 1}]}, "at least two"),
        ({"question": "q", "answers": [{"text": "a", "score": "high"}, {"text": "b", "score": 1}]}, "numeric"),
        ({"question": "q", "answers": [{"score": 1}, {"text": "b", "score": 1}]}, 'no "text"'),
        ({"messages": [{"content": "q"}], "chosen": "a", "rejected": "b"}, '"role"'),
    ],
)
def test_malformed_records_say_what_is_wrong(record: object, message: str) -> None:
    with pytest.raises(BadPreferenceLine, match=message) as caught:
        pairs_of(record, 7)
    assert str(caught.value).startswith("line 7: ")


def test_convert_reports_every_bad_line_and_writes_nothing_unless_told(tmp_path: Path) -> None:
    source = tmp_path / "raw.jsonl"
    lines = [
        json.dumps({"question": "q1", "chosen": "a", "rejected": "b"}),
        "{not json",
        "",
        json.dumps({"question": "q2", "answers": [{"text": "x", "score": 1}, {"text": "y", "score": 1}]}),
        json.dumps({"question": "q3"}),
    ]
    source.write_text("\n".join(lines) + "\n")
    target = tmp_path / "pairs.jsonl"
    with pytest.raises(ValueError, match="2 malformed line") as caught:
        convert(source, target)
    assert "line 2: not JSON" in str(caught.value) and "line 5: no answers" in str(caught.value)
    assert not target.exists()
    report = convert(source, target, skip_bad=True)
    assert (report.lines, report.pairs, report.skipped_lines, report.lines_without_pairs) == (4, 1, 2, 1)
    assert [json.loads(line)["prompt"][0]["content"] for line in target.read_text().splitlines()] == ["q1"]


def test_the_cli_exits_non_zero_on_bad_input_and_converts_good_input(tmp_path: Path) -> None:
    source, target = tmp_path / "raw.jsonl", tmp_path / "out" / "pairs.jsonl"
    source.write_text('{"question": "q", "chosen": "a", "rejected": "b"}\n{"question": 1}\n')
    command = [
        sys.executable,
        "-m",
        "lightning_otel.cli",
        "reward-model",
        "convert",
        "--input",
        str(source),
        "--output",
        str(target),
    ]
    failed = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1 and "line 2: no question" in failed.stderr and not target.exists()
    skipped = subprocess.run([*command, "--skip-bad"], capture_output=True, text=True, timeout=60)
    assert skipped.returncode == 0 and "1 preference pairs from 2 lines" in skipped.stdout
    assert "SKIPPED 1 malformed line" in skipped.stderr and target.exists()
