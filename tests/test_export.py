"""`lightning-otel export` / `agl.export_dataset`: every shape in every format, read back and compared with what the
store was built from (token ids, logprobs, messages, rewards, pairs), selection, errors, and flat memory on a store
of 100k spans."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from datasets import load_from_disk

import lightning_otel as agl
from lightning_otel.collector.client import Client
from lightning_otel.collector.server import EmbeddedCollector
from tests.export_store import RUN_ID, WRITE_TOOLS, BuiltRollout, build_store


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[BuiltRollout]]:
    path = tmp_path_factory.mktemp("export") / "small.sqlite3"
    return path, build_store(path, groups=12, group_size=4, steps=3)


def _read(out: Path, format: str) -> list[dict[str, Any]]:
    if format == "jsonl":
        return [json.loads(line) for line in out.read_text().splitlines()]
    if format == "parquet":
        return pq.read_table(out).to_pylist()
    return load_from_disk(str(out)).to_list()


def _text(message: dict[str, Any]) -> str:
    return message["content"]


@pytest.mark.parametrize("format", ["jsonl", "parquet", "hf"])
def test_sft_rows_hold_each_selected_call_exactly(small_store, tmp_path: Path, format: str) -> None:
    path, built = small_store
    report = agl.export_dataset(path, tmp_path / f"sft.{format}", format=format, progress=False)
    rows = _read(tmp_path / f"sft.{format}", format)
    assert report.rows == len(rows) == len(built)  # the run's agent_match ("write"): one call a rollout
    by_id = {r.rollout_id: r for r in built}
    for row in rows:
        rollout = by_id[row["rollout_id"]]
        call = rollout.calls[0]
        assert row["agent"] == "write" and row["call_index"] == 0
        assert row["prompt_token_ids"] == call.prompt_token_ids
        assert row["response_token_ids"] == call.response_token_ids
        assert row["response_logprobs"] == call.response_logprobs  # float64 all the way
        assert [m["role"] for m in row["messages"]] == ["user", "assistant"]
        assert _text(row["messages"][-1]) == call.reply["parts"][0]["content"]
        # the tools in OpenAI's chat format: a list in JSONL, JSON text in Parquet and datasets (TRL reads both)
        tools = row["tools"] if format == "jsonl" else json.loads(row["tools"])
        assert tools == [{"type": "function", "function": {k: v for k, v in WRITE_TOOLS[0].items() if k != "type"}}]
        assert (row["reward"], row["run_id"], row["step"], row["group_id"]) == (
            rollout.reward, RUN_ID, rollout.step, rollout.group_id
        )  # fmt: skip


@pytest.mark.parametrize("format", ["jsonl", "parquet", "hf"])
def test_pairs_are_best_against_worst_of_each_group_at_the_shared_prompt(small_store, tmp_path, format) -> None:
    path, built = small_store
    out = tmp_path / f"pairs.{format}"
    report = agl.export_dataset(path, out, shape="pairs", format=format, progress=False)
    rows = _read(out, format)
    expected = {}
    for group_id, members in itertools.groupby(built, key=lambda r: r.group_id):
        members = list(members)
        best, worst = max(members, key=lambda r: r.reward), min(members, key=lambda r: r.reward)
        if best.reward > worst.reward:
            expected[group_id] = (best, worst)
    assert report.rows == len(rows) == len(expected) > 0
    for row in rows:
        best, worst = expected[row["group_id"]]
        assert (row["chosen_reward"], row["rejected_reward"]) == (best.reward, worst.reward)
        assert row["prompt_token_ids"] == best.calls[0].prompt_token_ids == worst.calls[0].prompt_token_ids
        assert row["chosen_token_ids"] == best.calls[0].response_token_ids
        assert row["rejected_token_ids"] == worst.calls[0].response_token_ids
        assert _text(row["chosen"][0]) == best.calls[0].reply["parts"][0]["content"]
        assert row["prompt"][0]["content"] == f"question {row['task_id']}"
        assert (row["tools"] if format == "jsonl" else json.loads(row["tools"]))[0]["function"]["name"] == "lookup"


def test_all_pairs_above_a_margin_and_the_check_calls_never_pair(small_store, tmp_path) -> None:
    path, built = small_store
    out = tmp_path / "all.jsonl"
    rule = agl.PairRule("all", margin=1.0)
    report = agl.export_dataset(path, out, shape="pairs", pair_rule=rule, agent_match=None, progress=False)
    expected = sum(
        1
        for _, members in itertools.groupby(built, key=lambda r: r.group_id)
        for a, b in itertools.combinations(list(members), 2)
        if abs(a.reward - b.reward) > 1.0
    )
    rows = _read(out, "jsonl")
    assert len(rows) == expected and all(row["chosen_reward"] - row["rejected_reward"] > 1.0 for row in rows)
    assert {row["agent"] for row in rows} == {"write"}  # check calls saw different prompts (each its reply)
    assert report.pairs is not None and report.pairs.prompts_differ == expected


@pytest.mark.parametrize("format", ["jsonl", "parquet", "hf"])
def test_rollout_rows_hold_every_call_and_the_task(small_store, tmp_path, format) -> None:
    path, built = small_store
    out = tmp_path / f"rollouts.{format}"
    agl.export_dataset(path, out, shape="rollouts", format=format, progress=False)
    rows = {row["rollout_id"]: row for row in _read(out, format)}
    assert len(rows) == len(built)
    for rollout in built:
        row = rows[rollout.rollout_id]
        assert json.loads(row["input"])["question"].startswith("q") and row["status"] == "succeeded"
        assert [c["agent"] for c in row["calls"]] == ["write", "check"]
        assert [c["selected"] for c in row["calls"]] == [True, False]
        assert [c["tools"] is not None for c in row["calls"]] == [True, False]  # only the write call offered tools
        for call, made in zip(row["calls"], rollout.calls, strict=True):
            assert call["prompt_token_ids"] == made.prompt_token_ids
            assert call["response_token_ids"] == made.response_token_ids
            assert call["response_logprobs"] == made.response_logprobs


def test_selection_by_run_step_and_reward_says_what_it_left_out(small_store, tmp_path) -> None:
    path, built = small_store
    report = agl.export_dataset(path, tmp_path / "s.jsonl", step=1, min_reward=2.0, progress=False)
    wanted = [r for r in built if r.step == 1 and r.reward >= 2.0]
    assert report.rows == len(wanted) > 0
    assert report.left_out == {"at other steps": sum(r.step != 1 for r in built),
                               "below min_reward": sum(r.step == 1 and r.reward < 2.0 for r in built)}  # fmt: skip
    empty = agl.export_dataset(path, tmp_path / "none.jsonl", run_id="another-run", progress=False)
    assert empty.rows == 0 and empty.left_out == {"in other runs": len(built)}


def test_the_command_line_from_a_running_collector_and_its_errors(small_store, tmp_path) -> None:
    path, built = small_store
    collector = EmbeddedCollector.on_sqlite_file(path)
    addresses = collector.start()
    command = [sys.executable, "-m", "lightning_otel.cli", "export"]
    try:
        done = subprocess.run([*command, addresses.query, str(tmp_path / "p.parquet"), "--shape", "pairs"],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "pairs rows ->" in done.stdout and "rollout pairs" in done.stdout
        with Client(addresses.query) as client:  # the paging route itself: a bad cursor is a 400, not a crash
            response = client._http.get("/v1/queue/rollouts/page", params={"after": "not-a-cursor"})
            assert response.status_code == 400 and "cursor" in response.text
            response = client._http.get("/v1/queue/rollouts/page", params={"order": "sideways"})
            assert response.status_code == 400
            assert client.queue_stats()["succeeded"] == len(built)  # still serving
    finally:
        collector.stop()
    again = subprocess.run([*command, str(path), str(tmp_path / "p.parquet")], capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert again.returncode == 2 and "exists" in again.stderr and "--overwrite" in again.stderr
    nothing = subprocess.run([*command, str(path), str(tmp_path / "n.jsonl"), "--run", "nope"], capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert nothing.returncode == 1 and "no row was written" in nothing.stderr and "in other runs" in nothing.stdout
    missing = subprocess.run([*command, str(tmp_path / "absent.sqlite3"), str(tmp_path / "m.jsonl")],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert missing.returncode == 2 and "no store at" in missing.stderr


def _anonymous_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def test_a_store_of_100k_spans_exports_exactly_in_flat_memory(tmp_path: Path) -> None:
    """4,000 rollouts of 25 spans (each rollout's calls: 2 x 200-token prompts), read back whole: every token id
    exact; the process's anonymous memory sampled through the export does not grow with what has been written
    (a buffered export would hold ~3M token ids, well over 100 MiB, by the end)."""
    path = tmp_path / "big.sqlite3"
    built = build_store(path, groups=1000, group_size=4, extra_spans=21, prompt_len=200, response_len=16)
    samples: list[tuple[float, float]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append((time.perf_counter(), _anonymous_rss_mib()))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        report = agl.export_dataset(path, tmp_path / "big.parquet", shape="rollouts", progress=False)
    finally:
        done.set()
        sampler.join()
    rows_read = pq.ParquetFile(tmp_path / "big.parquet").metadata.num_rows
    assert report.rows == rows_read == len(built) == 4_000 and report.incomplete_rollouts == 0
    start, end = samples[0][0], samples[-1][0]
    early = max(rss for at, rss in samples if at - start < (end - start) * 0.3)
    late = max(rss for at, rss in samples if at - start > (end - start) * 0.7)
    print(f"export of 100k spans: {report.seconds:.1f} s, anonymous RSS {early:.0f} MiB early, {late:.0f} late")
    assert late - early < 40, (early, late)
    by_id = {r.rollout_id: r for r in built}
    for batch in pq.ParquetFile(tmp_path / "big.parquet").iter_batches(batch_size=500):
        for row in batch.to_pylist():
            made = by_id[row["rollout_id"]].calls
            assert [c["prompt_token_ids"] for c in row["calls"]] == [c.prompt_token_ids for c in made]
            assert [c["response_token_ids"] for c in row["calls"]] == [c.response_token_ids for c in made]


@pytest.mark.parametrize("format", ["jsonl", "parquet", "hf"])
def test_no_failure_leaves_a_file_and_an_existing_output_survives_a_failed_overwrite(small_store, tmp_path,
                                                                                      format) -> None:  # fmt: skip
    path, _ = small_store
    out = tmp_path / {"jsonl": "rows.jsonl", "parquet": "rows.parquet", "hf": "rows-ds"}[format]
    command = [sys.executable, "-m", "lightning_otel.cli", "export", str(path), str(out)]
    failures = {  # each exits non-zero: a bad argument (2), nothing selected (1), a store that is not there (2)
        "bad regex": (["--agent-match", "wr(ite"], 2, "not a valid regular expression"),
        "no validation rollouts": (["--mode", "val"], 1, "no row was written"),
        "no such run": (["--run", "nope"], 1, "in other runs"),
        "bad shape": (["--shape", "triples"], 2, "invalid choice"),
    }
    for why, (extra, code, said) in failures.items():
        done = subprocess.run([*command, *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode == code and said in done.stdout + done.stderr, (why, done.stdout, done.stderr)
        assert sorted(p.name for p in tmp_path.iterdir()) == [], (why, list(tmp_path.iterdir()))  # not even hidden
    first = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    before = _read(out, format)
    again = subprocess.run([*command, "--overwrite", "--run", "nope"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 1
    assert _read(out, format) == before and sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    with pytest.raises(ValueError, match="regular expression"):
        agl.export_dataset(path, out, agent_match="(", overwrite=True, progress=False)
    assert _read(out, format) == before and sorted(p.name for p in tmp_path.iterdir()) == [out.name]


def test_a_call_recorded_twice_exports_the_messages_of_the_copy_that_has_them() -> None:
    """The gateway's copy of a call (token ids, no content) and the agent client's (content, the same response id):
    whichever copy the adapter keeps, the row carries the messages (the demo exported some rows without them)."""
    from lightning_otel import semconv
    from lightning_otel.export.rollouts import exported_rollout

    ids = {semconv.AGL_PROMPT_TOKEN_IDS: [1, 2, 3], semconv.AGL_RESPONSE_TOKEN_IDS: [4, 5],
           semconv.GEN_AI_RESPONSE_ID: "chatcmpl-1", semconv.GEN_AI_OPERATION_NAME: "chat"}  # fmt: skip

    def message(role: str, text: str) -> str:
        return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])

    content = {
        semconv.GEN_AI_INPUT_MESSAGES: message("user", "hi"),
        semconv.GEN_AI_OUTPUT_MESSAGES: message("assistant", "HI"),
        semconv.GEN_AI_AGENT_NAME: "write",
    }
    gateway = {"spanId": "g", "startTimeUnixNano": 2, "attributes": ids}
    client = {"spanId": "c", "startTimeUnixNano": 1, "attributes": {**ids, **content}}
    for spans in ([gateway, client], [client, gateway]):
        (call,) = exported_rollout({"rollout_id": "ro-1"}, spans, agent_match="write").calls
        assert call.selected and call.prompt_token_ids == [1, 2, 3]
        assert call.input_messages == [{"role": "user", "content": "hi"}]
        assert call.output_message == {"role": "assistant", "content": "HI"}
