"""The SQL agent's reward: execution match in Spider's sense, on hand-made cases (examples/spider/spider_eval.py)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from spider_eval import QueryRejected, evaluate_query, execute, orders_result, results_match, three_level_reward


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "concert.sqlite"
    with sqlite3.connect(path) as connection:
        connection.executescript(
            """
            CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
            INSERT INTO singer VALUES (1, 'Ann', 'France', 30), (2, 'Bo', 'Japan', 41), (3, 'Cy', 'France', 25),
                                      (4, 'Di', 'Spain', 41);
            CREATE TABLE album (album_id INTEGER PRIMARY KEY, title TEXT, singer_id INTEGER);
            INSERT INTO album VALUES (1, 'Blue', 1), (2, 'Red', 1), (3, 'Sky', 2);
            """
        )
    connection.close()
    return path


@pytest.mark.parametrize(
    ("predicted", "gold"),
    [
        ("SELECT name FROM singer WHERE country = 'France'", "SELECT name FROM singer WHERE country = 'France'"),
        # another query, the same result
        ("SELECT name FROM singer WHERE age < 31", "SELECT name FROM singer WHERE country = 'France'"),
        # row order does not matter when the gold query does not order
        ("SELECT name FROM singer WHERE country = 'France' ORDER BY name DESC",
         "SELECT name FROM singer WHERE country = 'France'"),
        # columns in another order (Spider's evaluator allows a column permutation)
        ("SELECT count(*), country FROM singer GROUP BY country",
         "SELECT country, count(*) FROM singer GROUP BY country"),
        ("select COUNT(*) from singer;", "SELECT count(*) FROM singer"),
        ("SELECT T2.title FROM singer AS T1 JOIN album AS T2 ON T1.singer_id = T2.singer_id WHERE T1.name = 'Ann'",
         "SELECT title FROM album WHERE singer_id = 1"),
        ("WITH f AS (SELECT * FROM singer WHERE country = 'France') SELECT name FROM f",
         "SELECT name FROM singer WHERE country = 'France'"),
        ("-- a comment first\nSELECT name FROM singer WHERE country = 'France'",
         "SELECT name FROM singer WHERE country = 'France'"),
    ],
)  # fmt: skip
def test_queries_that_return_the_gold_result_score_1(db: Path, predicted: str, gold: str) -> None:
    assert evaluate_query(predicted, gold, db) == 1.0


@pytest.mark.parametrize(
    ("predicted", "gold"),
    [
        ("SELECT name FROM singer WHERE country = 'Japan'", "SELECT name FROM singer WHERE country = 'France'"),
        # the gold query orders: the same rows in another order do not match
        ("SELECT name FROM singer ORDER BY age ASC", "SELECT name FROM singer ORDER BY age DESC"),
        # a multiset, not a set: a duplicate row is a difference
        ("SELECT country FROM singer", "SELECT DISTINCT country FROM singer"),
        # an extra column is a different result
        ("SELECT name, age FROM singer WHERE country = 'France'", "SELECT name FROM singer WHERE country = 'France'"),
        ("SELECT max(age) FROM singer", "SELECT min(age) FROM singer"),
        ("SELECT name FROM singer WHERE country = 'Nowhere'", "SELECT name FROM singer WHERE country = 'France'"),
        ("SELECT nme FROM singer", "SELECT name FROM singer"),  # an error
        ("", "SELECT name FROM singer"),
        ("The answer is Ann and Cy.", "SELECT name FROM singer WHERE country = 'France'"),
        ("DELETE FROM singer", "SELECT name FROM singer"),
        ("SELECT name FROM singer; DELETE FROM singer", "SELECT name FROM singer"),  # several statements
        ("DROP TABLE singer", "SELECT name FROM singer"),
    ],
)  # fmt: skip
def test_queries_that_do_not_return_the_gold_result_score_0(db: Path, predicted: str, gold: str) -> None:
    assert evaluate_query(predicted, gold, db) == 0.0


def test_nothing_the_prediction_runs_can_change_the_database(db: Path) -> None:
    for statement in ("DELETE FROM singer", "WITH x AS (SELECT 1) DELETE FROM singer", "PRAGMA writable_schema=1"):
        evaluate_query(statement, "SELECT 1", db)
    assert execute("SELECT count(*) FROM singer", db) == [(4,)]


def test_a_query_past_the_deadline_is_stopped_and_scores_0(db: Path) -> None:
    endless = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n"
    started = time.monotonic()
    with pytest.raises(QueryRejected, match="timed out"):
        execute(endless, db, timeout_s=0.3)
    assert time.monotonic() - started < 3
    assert evaluate_query(endless, "SELECT 1", db, timeout_s=0.3) == 0.0


def test_raise_on_error_raises_for_the_prediction_and_always_for_a_broken_gold_query(db: Path) -> None:
    with pytest.raises(QueryRejected):
        evaluate_query("SELECT nme FROM singer", "SELECT name FROM singer", db, raise_on_error=True)
    with pytest.raises(QueryRejected):
        evaluate_query("SELECT name FROM singer", "SELECT nme FROM singer", db)
    with pytest.raises(FileNotFoundError):
        evaluate_query("SELECT 1", "SELECT 1", db.parent / "missing.sqlite")


def test_order_by_counts_only_at_the_top_level() -> None:
    assert orders_result("SELECT name FROM singer ORDER BY age")
    assert not orders_result("SELECT name FROM (SELECT * FROM singer ORDER BY age LIMIT 2)")
    assert not orders_result("SELECT name FROM singer -- ORDER BY age")


def test_results_match_compares_multisets_lists_and_column_permutations() -> None:
    assert results_match([(1, "a"), (2, "b")], [(2, "b"), (1, "a")], ordered=False)
    assert not results_match([(1, "a"), (2, "b")], [(2, "b"), (1, "a")], ordered=True)
    assert results_match([("a", 1)], [(1, "a")], ordered=True)
    assert not results_match([(1,), (1,)], [(1,)], ordered=False)
    assert not results_match([(1, 2)], [(1,)], ordered=False)
    assert results_match([], [], ordered=False)


@pytest.mark.parametrize(
    ("predicted", "reward"),
    [
        ("SELECT name FROM singer WHERE age < 31", 1.0),  # right
        ("SELECT name FROM singer WHERE country = 'Japan'", 0.0),  # runs, other rows
        ("SELECT nam FROM singer", -1.0),  # SQLite refuses it
        ("DELETE FROM singer", -1.0),  # not a SELECT: never run
        ("  ", -1.0),  # no query written
    ],
)
def test_the_three_level_reward_tells_a_query_that_runs_from_one_that_does_not(
    db: Path, predicted: str, reward: float
) -> None:
    assert three_level_reward(predicted, "SELECT name FROM singer WHERE country = 'France'", db) == reward
