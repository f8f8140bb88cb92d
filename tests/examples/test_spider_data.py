"""The spider example's data: the offline Spider-format generator and the converter of a Spider 1.0 download."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas", reason="the parquet files need pandas (the [verl] extra; not in the openai3 lane)")
import synthetic_spider  # noqa: E402
from prepare_dataset import FILES, convert_spider, data_ready, prepare  # noqa: E402
from spider_eval import execute  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, synthetic_spider.SpiderSet]:
    root = tmp_path_factory.mktemp("synthetic")
    return root, synthetic_spider.build(root, seed=0)


def test_the_generated_set_has_thousands_of_questions_over_several_databases(built: tuple) -> None:
    _, spider = built
    records = spider.train + spider.dev
    assert len(records) >= 2000
    assert len({record["db_id"] for record in records}) >= 6
    queries = " ".join(record["query"] for record in records)
    for construct in ("JOIN", "WHERE", "GROUP BY", "ORDER BY", "LIMIT", "DISTINCT", "count(", "avg(", " > ", " < "):
        assert construct in queries, construct


def test_no_dev_question_is_seen_in_training(built: tuple) -> None:
    _, spider = built
    assert not {r["question"] for r in spider.train} & {r["question"] for r in spider.dev}


def test_every_gold_query_runs_on_its_database_and_returns_rows(built: tuple) -> None:
    root, spider = built
    for record in spider.train[:300] + spider.dev[:300]:
        path = root / "database" / record["db_id"] / f"{record['db_id']}.sqlite"
        assert execute(record["query"], path), record


def test_the_generator_is_deterministic(tmp_path: Path, built: tuple) -> None:
    _, spider = built
    again = synthetic_spider.build(tmp_path, seed=0)
    assert again == spider
    assert synthetic_spider.build(tmp_path / "other", seed=1).train != spider.train


def test_prepare_writes_the_tutorials_files(tmp_path: Path) -> None:
    out = prepare(tmp_path / "data")
    assert data_ready(out)
    frames = {name: pd.read_parquet(out / name) for name in FILES}
    assert list(frames["train_spider.parquet"].columns) == ["db_id", "question", "query"]
    assert len(frames["test_dev_500.parquet"]) == 500
    assert set(frames["test_dev_500.parquet"]["question"]) <= set(frames["test_dev.parquet"]["question"])


def _tiny_spider(root: Path) -> Path:
    """A Spider 1.0-shaped download: two databases, train_spider.json, dev.json."""
    for db_id, rows in (("pets", [(1, "cat"), (2, "dog")]), ("zoo", [(1, "lion")])):
        folder = root / "database" / db_id
        folder.mkdir(parents=True)
        with sqlite3.connect(folder / f"{db_id}.sqlite") as connection:
            connection.execute("CREATE TABLE animal (id INTEGER, kind TEXT)")
            connection.executemany("INSERT INTO animal VALUES (?, ?)", rows)
        connection.close()
        (folder / "schema.sql").write_text("CREATE TABLE animal (id INTEGER, kind TEXT);")
    extra = {"query_toks": [], "question_toks": [], "sql": {}}
    train = [{"db_id": "pets", "question": f"How many pets {i}?", "query": "SELECT count(*) FROM animal", **extra}
             for i in range(3)]  # fmt: skip
    dev = [{"db_id": "zoo", "question": "Which kinds?", "query": "SELECT kind FROM animal", **extra}]
    (root / "train_spider.json").write_text(json.dumps(train))
    (root / "dev.json").write_text(json.dumps(dev))
    return root


def test_a_spider_download_is_converted(tmp_path: Path) -> None:
    spider = _tiny_spider(tmp_path / "spider")
    counts = convert_spider(spider, tmp_path / "data")
    assert counts == {"train_spider.parquet": 3, "test_dev_500.parquet": 1, "test_dev.parquet": 1}
    train = pd.read_parquet(tmp_path / "data" / "train_spider.parquet").to_dict("records")
    assert train[0] == {"db_id": "pets", "question": "How many pets 0?", "query": "SELECT count(*) FROM animal"}
    copied = tmp_path / "data" / "database" / "zoo" / "zoo.sqlite"
    assert execute("SELECT kind FROM animal", copied) == [("lion",)]


def test_a_directory_that_is_not_spider_is_refused_clearly(tmp_path: Path) -> None:
    (tmp_path / "dev.json").write_text("[]")
    with pytest.raises(FileNotFoundError, match=r"not a Spider 1\.0 directory: missing train_spider\.json, database"):
        convert_spider(tmp_path, tmp_path / "out")
    spider = _tiny_spider(tmp_path / "spider")
    (spider / "database" / "zoo" / "zoo.sqlite").unlink()
    with pytest.raises(FileNotFoundError, match=r"zoo\.sqlite is missing"):
        convert_spider(spider, tmp_path / "out2")
