"""ATIF (Harbor's trajectory format) out of a store and back in: `export --shape atif` validates against Harbor's own
models (the pinned wheel), store -> ATIF -> store -> ATIF is identical (token ids, logprobs, rewards, messages, tool
calls, the agent tree), trajectories Harbor's own writers produced (Terminus-2 with file-referenced sub-agents and
reasoning, OpenHands) and one in their shape import, show in the rollout view, export and round-trip, steps without
token ids are re-tokenized only when asked, and bad input is refused before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from lightning_otel.collector.server import EmbeddedCollector
from lightning_otel.export.atif import SCHEMA_VERSION, rollout_trajectory, trajectory_rollout
from lightning_otel.export.atif_import import import_atif
from lightning_otel.export.dataset_export import export_dataset
from lightning_otel.export.rollouts import ExportedCall, ExportedRollout
from tests.atif_models import validate
from tests.export_store import WRITE_TOOLS, BuiltRollout, build_store

FIXTURES = Path(__file__).parent / "fixtures"


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def export_atif(store: Path, out: Path) -> list[dict[str, Any]]:
    report = export_dataset(store, out, shape="atif", status=None, progress=False)
    assert report.rows == report.rollouts_exported
    return sorted(read(out), key=lambda t: t["trajectory_id"])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[BuiltRollout]]:
    path = tmp_path_factory.mktemp("atif") / "store.sqlite3"
    return path, build_store(path, groups=6, group_size=3, steps=2)


def test_a_store_goes_to_atif_and_back_identical(store: tuple[Path, list[BuiltRollout]], tmp_path: Path) -> None:
    path, built = store
    first = export_atif(path, tmp_path / "first.jsonl")
    assert len(first) == len(built)
    for trajectory in first:
        validate(trajectory)
    by_id = {r.rollout_id: r for r in built}
    for trajectory in first:
        rollout = by_id[trajectory["trajectory_id"]]
        assert trajectory["schema_version"] == SCHEMA_VERSION and trajectory["agent"]["name"] == "solver"
        assert trajectory["extra"]["lightning_otel"]["reward"] == rollout.reward
        subs = {sub["agent"]["name"]: sub for sub in trajectory["subagent_trajectories"]}
        assert sorted(subs) == ["check", "write"]  # the agent tree: each agent an embedded trajectory
        # the tools the write calls' requests offered (OpenAI's format, as ATIF holds them); check's offered none
        assert subs["write"]["agent"]["tool_definitions"][0]["function"]["name"] == WRITE_TOOLS[0]["name"]
        assert "tool_definitions" not in subs["check"]["agent"]
        for call in rollout.calls:
            [step] = [s for s in subs[call.agent]["steps"] if s["source"] == "agent"]
            assert step["metrics"]["prompt_token_ids"] == call.prompt_token_ids
            assert step["metrics"]["completion_token_ids"] == call.response_token_ids
            assert step["metrics"]["logprobs"] == call.response_logprobs
            assert step["message"] == call.reply["parts"][0]["content"]

    report = import_atif(tmp_path / "first.jsonl", tmp_path / "imported.sqlite3")
    assert len(report.rollouts) == len(built) and report.calls_without_token_ids == 0
    second = export_atif(tmp_path / "imported.sqlite3", tmp_path / "second.jsonl")
    assert second == first
    # the imported store trains as the original does: the same SFT rows (the run's agent_match travelled along)
    rows = [export_dataset(store_path, tmp_path / f"sft-{n}.jsonl", progress=False) for n, store_path in
            enumerate((path, tmp_path / "imported.sqlite3"))]  # fmt: skip
    sft = [sorted(read(tmp_path / f"sft-{n}.jsonl"), key=lambda r: r["rollout_id"]) for n in range(2)]
    assert rows[0].rows == rows[1].rows == len(built)
    keep = ("rollout_id", "messages", "tools", "prompt_token_ids", "response_token_ids", "response_logprobs", "reward")
    assert [{k: r[k] for k in keep} for r in sft[0]] == [{k: r[k] for k in keep} for r in sft[1]]
    assert all(row["tools"][0]["function"]["name"] == "lookup" for row in sft[1])  # the write calls' tools, back


HARBOR = FIXTURES / "harbor"  # trajectories Harbor's own writers produced (its test suite's golden files, Apache-2.0)


def _view(store: Path, rollout_id: str) -> dict[str, Any]:
    collector = EmbeddedCollector.on_sqlite_file(store)
    addresses = collector.start()
    try:
        return httpx.get(f"{addresses.query}/v1/ui/rollouts/{rollout_id}", timeout=30).json()
    finally:
        collector.stop()


def _call(index: int, inputs: list[dict[str, Any]], output: dict[str, Any], agent: str | None) -> ExportedCall:
    return ExportedCall(index, f"{index + 1:016x}", f"resp-{index}", agent, True, [1, 2, index], [7, 8], [-0.5, -0.25],
                        inputs, output, None, 3)  # fmt: skip


def test_tool_calls_results_and_a_fresh_context_cross_as_steps_and_back() -> None:
    system, user = {"role": "system", "content": "You book rooms."}, {"role": "user", "content": "Book room 4"}
    call = {"id": "call-1", "type": "function", "function": {"name": "book", "arguments": '{"room": 4}'}}
    asked = {"role": "assistant", "content": None, "tool_calls": [call]}
    result = {"role": "tool", "tool_call_id": "call-1", "content": "booked"}
    done = {"role": "assistant", "content": "Room 4 is yours."}
    fresh = [{"role": "user", "content": "Summarize: Room 4 is yours."}]
    calls = [_call(0, [system, user], asked, "booker"), _call(1, [system, user, asked, result], done, "booker"),
             _call(2, fresh, {"role": "assistant", "content": "Booked."}, "booker")]  # fmt: skip
    rollout = ExportedRollout("ro-tools", None, "t1", "g1", "run-1", 2, "train", "succeeded", 1.0, {"task": "book"}, 3,
                              calls, metadata={"run_id": "run-1"})  # fmt: skip
    trajectory = rollout_trajectory(rollout)
    validate(trajectory)
    [booker] = trajectory["subagent_trajectories"]
    steps = booker["steps"]
    assert [s["source"] for s in steps] == ["system", "user", "agent", "agent", "user", "agent"]
    assert steps[2]["tool_calls"] == [{"tool_call_id": "call-1", "function_name": "book", "arguments": {"room": 4}}]
    assert steps[2]["observation"] == {"results": [{"source_call_id": "call-1", "content": "booked"}]}
    assert steps[4]["extra"]["lightning_otel"]["context"] == "new"  # the third call started afresh

    back = trajectory_rollout(trajectory)
    assert [(c.agent, c.input_messages, c.output_message) for c in back.calls] == [
        ("booker", [system, user], asked), ("booker", [system, user, asked, result], done),
        ("booker", fresh, {"role": "assistant", "content": "Booked."}),
    ]  # fmt: skip
    assert [c.response_token_ids for c in back.calls] == [[7, 8]] * 3
    assert (back.rollout_id, back.reward, back.input, back.metadata) == ("ro-tools", 1.0, {"task": "book"},
                                                                          {"run_id": "run-1"})  # fmt: skip


def test_a_trajectory_in_another_tools_shape_imports_shows_in_the_view_and_round_trips(tmp_path: Path) -> None:
    source = FIXTURES / "atif_terminal_agent.json"
    other = json.loads(source.read_text())
    validate(other)
    report = import_atif(source, tmp_path / "store.sqlite3")
    assert report.calls == 2 and report.calls_without_token_ids == 1  # the second step carries no token ids
    assert any("no token ids" in note for note in report.notes)
    [rollout_id] = report.rollouts
    view = _view(tmp_path / "store.sqlite3", rollout_id)
    assert [c["agent"] for c in view["calls"]] == ["terminus-2", "terminus-2"]
    assert view["calls"][0]["response_token_ids"] == other["steps"][2]["metrics"]["completion_token_ids"]
    tool_result = {"type": "tool_call_response", "id": "call_0", "response": "hello.txt\n"}
    assert view["calls"][1]["input_messages"][-1] == {"role": "tool", "parts": [tool_result]}  # the observation
    assert view["final_reward"] == 1.0

    sft = export_dataset(tmp_path / "store.sqlite3", tmp_path / "sft.jsonl", agent_match=None, progress=False)
    assert sft.rows == 2 and read(tmp_path / "sft.jsonl")[1]["messages"][-1]["content"] == "The file is hello.txt."
    first = export_atif(tmp_path / "store.sqlite3", tmp_path / "first.jsonl")
    import_atif(tmp_path / "first.jsonl", tmp_path / "again.sqlite3")
    assert export_atif(tmp_path / "again.sqlite3", tmp_path / "second.jsonl") == first


def _round_trips(store: Path, tmp_path: Path) -> list[dict[str, Any]]:
    first = export_atif(store, tmp_path / "first.jsonl")
    for trajectory in first:
        validate(trajectory)
    import_atif(tmp_path / "first.jsonl", tmp_path / "again.sqlite3")
    assert export_atif(tmp_path / "again.sqlite3", tmp_path / "second.jsonl") == first
    return first


def test_terminus_2s_context_summarization_imports_with_its_sub_agents_token_ids_and_round_trips(
    tmp_path: Path,
) -> None:
    """Harbor's Terminus-2 summarizes its context in three sub-agent trajectories written beside the main one and
    referenced by `trajectory_path`; each sub-agent starts with steps copied from the parent (`is_copied_context`),
    which are its history, not calls of its own."""
    source = HARBOR / "terminus_2" / "context-summarization" / "trajectory.json"
    original = json.loads(source.read_text())
    validate(original)
    report = import_atif(source, tmp_path / "store.sqlite3")
    assert report.calls == 10 and report.calls_without_token_ids == 0, report.summary()
    assert not report.notes, report.notes
    [rollout_id] = report.rollouts
    view = _view(tmp_path / "store.sqlite3", rollout_id)
    agents = [c["agent"] for c in view["calls"]]
    assert agents.count("terminus-2") == 7  # the main agent's steps 2-4 and 7-10
    for name in ("summary", "questions", "answers"):
        assert agents.count(f"terminus-2-summarization-{name}") == 1  # one call each: the copied steps are not calls
    main_steps = [s for s in original["steps"] if s["source"] == "agent"]
    main_calls = [c for c in view["calls"] if c["agent"] == "terminus-2"]
    assert [c["response_token_ids"] for c in main_calls] == [s["metrics"]["completion_token_ids"] for s in main_steps]
    assert [c["prompt_token_ids"] for c in main_calls] == [s["metrics"]["prompt_token_ids"] for s in main_steps]
    summary = json.loads((source.parent / "trajectory.summarization-1-summary.json").read_text())
    [summary_call] = [c for c in view["calls"] if c["agent"] == "terminus-2-summarization-summary"]
    assert summary_call["response_token_ids"] == summary["steps"][-1]["metrics"]["completion_token_ids"]
    # its prompt: the copied conversation (the task, two replies with their terminal output) and the handoff request
    assert [m["role"] for m in summary_call["input_messages"]] == ["user", "assistant", "tool", "assistant", "tool",
                                                                   "user"]  # fmt: skip

    first = _round_trips(tmp_path / "store.sqlite3", tmp_path)
    [trajectory] = first
    assert sorted(sub["agent"]["name"] for sub in trajectory["subagent_trajectories"]) == [
        "terminus-2-summarization-answers",
        "terminus-2-summarization-questions",
        "terminus-2-summarization-summary",
    ]


def test_terminus_2s_reasoning_survives_and_steps_without_ids_are_retokenized_only_when_asked(tmp_path: Path) -> None:
    from lightning_otel.testing import save_tiny_model

    source = HARBOR / "terminus_2" / "hello-world-invalid-json.trajectory.json"
    original = json.loads(source.read_text())
    plain = import_atif(source, tmp_path / "plain.sqlite3")
    assert plain.calls == plain.calls_without_token_ids == 4 and plain.calls_retokenized == 0
    assert sum("no token ids" in note for note in plain.notes) == 4
    [trajectory] = _round_trips(tmp_path / "plain.sqlite3", tmp_path)
    reasoning = [s.get("reasoning_content") for s in trajectory["steps"] if s["source"] == "agent"]
    assert reasoning == [s["reasoning_content"] for s in original["steps"] if s["source"] == "agent"]
    assert all("metrics" not in s for s in trajectory["steps"])  # no ids were made up

    model = save_tiny_model(tmp_path / "model")
    command = [sys.executable, "-m", "lightning_otel.cli", "import", str(source), str(tmp_path / "ids.sqlite3"),
               "--tokenizer", str(model)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "(0 without token ids, 4 re-tokenized)" in done.stdout
    exported = export_atif(tmp_path / "ids.sqlite3", tmp_path / "ids.jsonl")
    steps = [s for s in exported[0]["steps"] if s["source"] == "agent"]
    assert all(s["extra"]["lightning_otel"]["token_ids_source"] == f"retokenized:{model}" for s in steps)
    assert all("logprobs" not in s["metrics"] for s in steps)  # nothing sampled them
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    first = steps[0]
    assert tokenizer.decode(first["metrics"]["completion_token_ids"]) == original["steps"][1]["message"] + "<|im_end|>"
    assert tokenizer.decode(first["metrics"]["prompt_token_ids"]).endswith("<|im_start|>assistant\n")


def test_an_openhands_trajectory_imports_and_round_trips(tmp_path: Path) -> None:
    source = HARBOR / "openhands" / "hello-world.trajectory.json"
    report = import_atif(source, tmp_path / "store.sqlite3")
    assert report.calls == 2 and report.calls_without_token_ids == 2
    [rollout_id] = report.rollouts
    view = _view(tmp_path / "store.sqlite3", rollout_id)
    assert [c["agent"] for c in view["calls"]] == ["openhands", "openhands"]
    assert view["calls"][0]["input_messages"][0]["role"] == "system"  # OpenHands' system prompt step
    _round_trips(tmp_path / "store.sqlite3", tmp_path)


def test_bad_input_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"schema_version": "ATIF-v1.7", "agent": {"name": "a"}, "steps": []}\n{nope\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not JSON"):
        import_atif(tmp_path / "bad.jsonl", tmp_path / "store.sqlite3")
    with pytest.raises(ValueError, match=r"trajectory 1: not an ATIF trajectory: schema_version 'v2'"):
        import_atif([{"schema_version": "v2", "agent": {}, "steps": []}], tmp_path / "store.sqlite3")
    assert not (tmp_path / "store.sqlite3").exists()  # nothing written
    import_atif(FIXTURES / "atif_terminal_agent.json", tmp_path / "store.sqlite3")
    command = [sys.executable, "-m", "lightning_otel.cli", "import", str(FIXTURES / "atif_terminal_agent.json"),
               str(tmp_path / "store.sqlite3")]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "already holds rollouts" in done.stderr
    with pytest.raises(ValueError, match="JSON Lines"):
        export_dataset(tmp_path / "store.sqlite3", tmp_path / "out.parquet", shape="atif", progress=False)
