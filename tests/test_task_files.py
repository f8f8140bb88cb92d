"""`lightning_otel.load_tasks`: tasks from JSONL, a JSON list or parquet; clear errors for the rest."""

from __future__ import annotations

from pathlib import Path

import pytest

import lightning_otel


def test_jsonl_json_and_parquet_give_the_same_tasks(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    expected = [{"question": "q1", "answer": 1}, {"question": "q2", "answer": 2}]
    (tmp_path / "t.jsonl").write_text('{"question": "q1", "answer": 1}\n\n{"question": "q2", "answer": 2}\n')
    (tmp_path / "t.json").write_text('[{"question": "q1", "answer": 1}, {"question": "q2", "answer": 2}]')
    pd.DataFrame(expected).to_parquet(tmp_path / "t.parquet")
    for name in ("t.jsonl", "t.json", "t.parquet"):
        assert lightning_otel.load_tasks(tmp_path / name) == expected, name


def test_empty_or_broken_files_are_refused_with_their_name(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n\n")
    (tmp_path / "broken.jsonl").write_text('{"question": "q1"}\n{"question": \n')
    with pytest.raises(ValueError, match=r"empty\.jsonl holds no tasks"):
        lightning_otel.load_tasks(tmp_path / "empty.jsonl")
    with pytest.raises(ValueError, match=r"broken\.jsonl: not JSON or JSONL"):
        lightning_otel.load_tasks(tmp_path / "broken.jsonl")
    with pytest.raises(FileNotFoundError):
        lightning_otel.load_tasks(tmp_path / "missing.jsonl")


def test_a_hugging_face_dataset_directory(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    expected = [{"question": "q1", "answer": 1}, {"question": "q2", "answer": 2}]
    datasets.Dataset.from_list(expected).save_to_disk(str(tmp_path / "one"))
    assert lightning_otel.load_tasks(tmp_path / "one") == expected
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_list(expected),
                                   "test": datasets.Dataset.from_list(expected[:1])})  # fmt: skip
    splits.save_to_disk(str(tmp_path / "two"))
    with pytest.raises(ValueError, match=r"holds the splits \['train', 'test'\]: give one split's directory"):
        lightning_otel.load_tasks(tmp_path / "two")
    assert lightning_otel.load_tasks(tmp_path / "two" / "test") == expected[:1]
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="not a dataset saved with save_to_disk"):
        lightning_otel.load_tasks(tmp_path / "plain")
