"""Raw answer ratings -> TRL's preference format (`lightning-otel reward-model convert`).

Each input line is a JSON object with the question (`question`, `prompt` or `messages`: a chat before the answer)
and its answers in one of three shapes:

    {"question": "...", "chosen": "...", "rejected": "..."}                    one pair
    {"question": "...", "chosen": ["...", ...], "rejected": ["...", ...]}      every chosen x every rejected
    {"question": "...", "answers": [{"text": "...", "score": 4}, ...]}         every pair with different scores
                                                                                 (`answer`/`content`, `rating`)

Each output line is TRL's conversational preference row with an explicit prompt:
`{"prompt": [messages], "chosen": [{"role": "assistant", ...}], "rejected": [...], "margin"?: float}` (the score
difference for rated answers, when `with_margin`). A malformed line is an error naming its line number and what is
wrong; `convert` reports every one and writes nothing unless `skip_bad` is set, in which case bad lines are counted.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Message = dict[str, str]


class BadPreferenceLine(ValueError):
    """One input line that cannot become preference pairs."""

    def __init__(self, line_number: int, reason: str) -> None:
        super().__init__(f"line {line_number}: {reason}")
        self.line_number = line_number
        self.reason = reason


@dataclass(slots=True)
class ConversionReport:
    lines: int = 0
    pairs: int = 0
    skipped_lines: int = 0
    lines_without_pairs: int = 0  # e.g. every answer rated the same
    errors: list[str] = field(default_factory=list)


def _prompt(record: dict[str, Any], line: int) -> list[Message]:
    if "messages" in record:
        messages = record["messages"]
        if not isinstance(messages, list) or not messages:
            raise BadPreferenceLine(line, '"messages" must be a non-empty list of {"role", "content"} objects')
        for message in messages:
            if not isinstance(message, dict) or not isinstance(message.get("content"), str) or "role" not in message:
                raise BadPreferenceLine(line, 'each message needs a "role" and a string "content"')
        return [{"role": str(m["role"]), "content": m["content"]} for m in messages]
    for key in ("question", "prompt"):
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return [{"role": "user", "content": value}]
    raise BadPreferenceLine(line, 'no question: give "question" or "prompt" (a non-empty string) or "messages"')


def _texts(value: Any, key: str, line: int) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
        raise BadPreferenceLine(line, f'"{key}" must be a non-empty string or a list of non-empty strings')
    return texts


def _rated(answers: Any, line: int) -> list[tuple[str, float]]:
    if not isinstance(answers, list) or len(answers) < 2:
        raise BadPreferenceLine(line, '"answers" must be a list of at least two {"text", "score"} objects')
    rated = []
    for index, answer in enumerate(answers):
        if not isinstance(answer, dict):
            raise BadPreferenceLine(line, f"answer {index} is not an object")
        text = next((answer[k] for k in ("text", "answer", "content") if isinstance(answer.get(k), str)), None)
        score = next((answer[k] for k in ("score", "rating") if k in answer), None)
        if not text or not text.strip():
            raise BadPreferenceLine(line, f'answer {index} has no "text" (or "answer"/"content") string')
        if isinstance(score, bool) or not isinstance(score, (int, float)) or score != score:
            raise BadPreferenceLine(line, f'answer {index} has no numeric "score" (or "rating")')
        rated.append((text, float(score)))
    return rated


def pairs_of(record: Any, line: int, *, with_margin: bool = False) -> list[dict[str, Any]]:
    """The preference rows one input record gives."""
    if not isinstance(record, dict):
        raise BadPreferenceLine(line, "not a JSON object")
    prompt = _prompt(record, line)

    def row(chosen: str, rejected: str, margin: float | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "prompt": prompt,
            "chosen": [{"role": "assistant", "content": chosen}],
            "rejected": [{"role": "assistant", "content": rejected}],
        }
        if with_margin and margin is not None:
            out["margin"] = margin
        return out

    if "answers" in record:
        rated = _rated(record["answers"], line)
        return [
            row(a, b, sa - sb) if sa > sb else row(b, a, sb - sa)
            for (a, sa), (b, sb) in itertools.combinations(rated, 2)
            if sa != sb
        ]
    if "chosen" in record and "rejected" in record:
        chosen, rejected = _texts(record["chosen"], "chosen", line), _texts(record["rejected"], "rejected", line)
        same = set(chosen) & set(rejected)
        if same:
            raise BadPreferenceLine(line, f"an answer is both chosen and rejected: {sorted(same)[0]!r}")
        return [row(c, r) for c, r in itertools.product(chosen, rejected)]
    raise BadPreferenceLine(line, 'no answers: give "chosen" and "rejected", or "answers" with scores')


def read_pairs(
    lines: Iterable[str], report: ConversionReport, *, with_margin: bool = False
) -> Iterator[dict[str, Any]]:
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        report.lines += 1
        try:
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise BadPreferenceLine(number, f"not JSON ({exc.msg} at column {exc.colno})") from None
            rows = pairs_of(record, number, with_margin=with_margin)
        except BadPreferenceLine as exc:
            report.errors.append(str(exc))  # convert() refuses to write unless skip_bad
            report.skipped_lines += 1
            continue
        if not rows:
            report.lines_without_pairs += 1
        report.pairs += len(rows)
        yield from rows


def convert(source: Path, target: Path, *, skip_bad: bool = False, with_margin: bool = False) -> ConversionReport:
    """Convert a raw JSONL file; on a malformed line (unless `skip_bad`) raise with every error and write nothing."""
    report = ConversionReport()
    with source.open(encoding="utf-8") as lines:
        rows = list(read_pairs(lines, report, with_margin=with_margin))
    if report.errors and not skip_bad:
        shown = "\n  ".join(report.errors[:20])
        more = f"\n  ... and {len(report.errors) - 20} more" if len(report.errors) > 20 else ""
        raise ValueError(f"{source}: {len(report.errors)} malformed line(s); nothing written:\n  {shown}{more}")
    if not rows:
        raise ValueError(f"{source}: no preference pair in {report.lines} line(s)")
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return report
