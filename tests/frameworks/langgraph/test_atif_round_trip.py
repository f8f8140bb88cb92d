"""A LangGraph multi-agent rollout (a supervisor handing off to a math agent that calls a tool) through a real
runner into a store, then out as ATIF (valid by Harbor's own models), into another store and out again: identical,
with the agent tree (each agent an embedded trajectory), the tool calls and their results, and the token ids."""

from __future__ import annotations

import json
from pathlib import Path

import lightning_otel as agl
from lightning_otel.collector.server import CollectorConfig
from lightning_otel.export.atif_import import import_atif
from lightning_otel.export.dataset_export import export_dataset
from lightning_otel.testing import OpenAITestServer
from tests.atif_models import validate
from tests.frameworks.langgraph import programs


def trajectories(store: Path, out: Path) -> list[dict]:
    export_dataset(store, out, shape="atif", progress=False)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_a_supervisor_teams_rollout_round_trips_through_atif(tmp_path: Path) -> None:
    store = tmp_path / "team.sqlite3"
    config = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=f"sqlite:///{store}")
    with OpenAITestServer(replies=programs.SUPERVISOR_REPLIES) as server:
        trainer = agl.Trainer(
            n_runners=1,
            collector=config,
            initial_resources={"main_llm": agl.LLM(server.base_url, "agl-tiny")},
            runner_options=agl.RunnerOptions(capture_content=True),
        )
        result = trainer.dev("tests.frameworks.langgraph.programs:supervisor_rollout",
                             [{"task_id": "sum", "question": "What is 2 + 3?"}], print_spans=False)  # fmt: skip
    assert [r["reward"] for r in result.train[0].rollouts] == [1.0]

    [first] = trajectories(store, tmp_path / "first.jsonl")
    validate(first)
    subs = {sub["agent"]["name"]: sub for sub in first["subagent_trajectories"]}
    assert sorted(subs) == ["math", "supervisor"]
    handoff = next(s for s in subs["supervisor"]["steps"] if s.get("tool_calls") and s.get("llm_call_count") == 1)
    assert handoff["tool_calls"][0]["function_name"] == "transfer_to_math"
    # the math agent's prompt carries the supervisor's handoff (a step, not its call); its own call asks for add
    add = next(s for s in subs["math"]["steps"] if s.get("tool_calls") and s.get("llm_call_count") == 1)
    assert add["tool_calls"][0]["function_name"] == "add" and add["tool_calls"][0]["arguments"] == {"a": 2, "b": 3}
    assert add["observation"]["results"][0]["content"] == "5"  # the tool's result, on the step that asked for it
    calls = [s for sub in subs.values() for s in sub["steps"] if s["source"] == "agent" and s.get("llm_call_count")]
    assert len(calls) == 4 and all(s["metrics"]["completion_token_ids"] for s in calls)

    import_atif(tmp_path / "first.jsonl", tmp_path / "again.sqlite3")
    [second] = trajectories(tmp_path / "again.sqlite3", tmp_path / "second.jsonl")
    assert second == first
