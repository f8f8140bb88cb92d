"""Execution match in Spider's sense: run the gold and the predicted SQL on the task's database and compare results.

    evaluate_query(query, ground_truth, db_path, raise_on_error=False) -> 1.0 or 0.0
    three_level_reward(query, ground_truth, db_path) -> 1.0 right, 0.0 ran but wrong, -1.0 no query that runs

Results are compared as multisets of rows (row order ignored) unless the gold query orders its result (a top-level
ORDER BY), then as lists. Like Spider's test-suite evaluator, columns may come in another order when one column
permutation makes the results equal. Only a single SELECT (or WITH ... SELECT) is run, on a read-only connection,
with a deadline (a bad query cannot hang a runner) and a cap on rows read. Anything else (errors, timeouts,
other statements, several statements) scores 0.
"""

from __future__ import annotations

import difflib
import itertools
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

TIMEOUT_S = 5.0
MAX_ROWS = 100_000
_MAX_PERMUTED_COLUMNS = 6  # 720 permutations at most


class QueryRejected(ValueError):
    """The predicted SQL is not a single read-only SELECT, took too long, or failed to run."""


def _strip_comments(sql: str) -> str:
    sql = re.sub(r"/\*.*?\*/", " ", sql, flags=re.DOTALL)
    return re.sub(r"--[^\n]*", " ", sql)


def _is_select(sql: str) -> bool:
    words = _strip_comments(sql).strip().lstrip("(").split(None, 1)
    return bool(words) and words[0].upper() in ("SELECT", "WITH")


def orders_result(sql: str) -> bool:
    """Whether the query's outermost level has an ORDER BY (parenthesised subqueries do not count)."""
    depth, outer = 0, []
    for char in _strip_comments(sql):
        depth += (char == "(") - (char == ")")
        outer.append(char if depth == 0 else " ")
    return re.search(r"\border\s+by\b", "".join(outer), re.IGNORECASE) is not None


def execute(sql: str, db_path: str | Path, *, timeout_s: float = TIMEOUT_S, max_rows: int = MAX_ROWS) -> list[tuple]:
    """Run one read-only SELECT; `QueryRejected` for anything else, an error, or past the deadline."""
    if not _is_select(sql):
        raise QueryRejected(f"not a SELECT statement: {sql[:80]!r}")
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"no database at {path}")
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    deadline = time.monotonic() + timeout_s
    connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)  # non-zero aborts
    try:
        cursor = connection.execute(sql.strip().rstrip(";"))
        rows = cursor.fetchmany(max_rows + 1)
    except sqlite3.Error as exc:
        reason = "timed out" if time.monotonic() > deadline else str(exc)
        raise QueryRejected(f"{reason}: {sql[:80]!r}") from exc
    finally:
        connection.close()
    if len(rows) > max_rows:
        raise QueryRejected(f"more than {max_rows} rows: {sql[:80]!r}")
    return rows


def results_match(predicted: Sequence[tuple], gold: Sequence[tuple], *, ordered: bool) -> bool:
    """Spider's result equality: same rows (as a multiset, or in order when `ordered`), up to a column permutation."""
    if len(predicted) != len(gold):
        return False
    if not gold:
        return True
    width = len(gold[0])
    if any(len(row) != width for row in predicted):
        return False
    if width > _MAX_PERMUTED_COLUMNS:
        orders: Sequence[tuple[int, ...]] = [tuple(range(width))]
    else:
        orders = list(itertools.permutations(range(width)))
    target: list[tuple] | Counter[tuple] = list(gold) if ordered else Counter(gold)
    for order in orders:
        permuted = [tuple(row[i] for i in order) for row in predicted]
        if (permuted if ordered else Counter(permuted)) == target:
            return True
    return False


def evaluate_query(
    query: str, ground_truth: str, db_path: str | Path, raise_on_error: bool = False, *, timeout_s: float = TIMEOUT_S
) -> float:
    """1.0 when `query` returns what `ground_truth` returns on the database at `db_path`, else 0.0. With
    `raise_on_error`, a predicted query that cannot run raises `QueryRejected` instead of scoring 0. A gold query
    that cannot run always raises: the task is broken, not the agent."""
    gold = execute(ground_truth, db_path, timeout_s=timeout_s)
    try:
        predicted = execute(query, db_path, timeout_s=timeout_s)
    except QueryRejected:
        if raise_on_error:
            raise
        return 0.0
    return 1.0 if results_match(predicted, gold, ordered=orders_result(ground_truth)) else 0.0


def three_level_reward(query: str, ground_truth: str, db_path: str | Path, *, timeout_s: float = TIMEOUT_S) -> float:
    """SkyRL-SQL's and verl's text-to-SQL reward: +1 when `query` returns what `ground_truth` returns, 0 when it runs
    and returns something else, -1 when there is no query SQLite will run (none written, refused, too slow). Execution
    match alone scores "refused" and "ran but wrong" alike; a small model learns to write SQL that runs first."""
    if not query.strip():
        return -1.0
    try:
        return evaluate_query(query, ground_truth, db_path, raise_on_error=True, timeout_s=timeout_s)
    except QueryRejected:
        return -1.0


def partial_credit(query: str, ground_truth: str, matched: float) -> float:
    """Execution match, or, short of it, up to 0.5 for how close the query's text is to the gold query's (difflib's
    ratio). A tiny random policy never writes a correct query: execution match alone gives every attempt 0, no
    group has a signal and no GRPO step can train. The tutorial's reward is `matched` alone."""
    if matched:
        return matched
    return 0.5 * difflib.SequenceMatcher(None, query.strip().lower(), ground_truth.strip().lower()).ratio()
