"""Claude Code, unmodified, trained through the policy gateway (examples/claude_code): the pinned CLI from the
example's lock file, its own spans joined to the gateway's token-exact records, so `agent_match` selects a
sub-agent's calls by the name Claude Code gives it; and one GRPO step of VERL on CPU on its calls."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lightning_otel as agl
from lightning_otel import semconv
from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.collector import Client, EmbeddedCollector
from lightning_otel.serving.collector_tracer import collector_tracer
from lightning_otel.serving.gateway import GatewayServer, PolicyGateway
from lightning_otel.testing import OpenAITestServer
from lightning_otel.testing.replies import Reply, ToolCall
from tests.harnesses.example_runs import EXAMPLES, check_dry_run, npm_ci, run_training

EXAMPLE = EXAMPLES / "claude_code"


@pytest.fixture(scope="module")
def claude_code() -> Path:
    return npm_ci(EXAMPLE, "@anthropic-ai/claude-code", "claude")


@pytest.fixture
def example_agent() -> Iterator[Any]:
    """The example's agent.py, loaded under a name of its own (other examples have an `agent` module too)."""
    name = "claude_code_example_agent"
    spec = importlib.util.spec_from_file_location(name, EXAMPLE / "agent.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)  # its dataclasses look themselves up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


def test_a_sub_agent_is_selected_by_the_name_claude_code_gives_it(
    claude_code: Path, example_agent: Any, tmp_path: Path
) -> None:
    task = {"word": "apple", "prompt": "Write the word apple into a file named answer.txt."}
    explore = {"description": "look", "prompt": "List the files here.", "subagent_type": "Explore",
               "run_in_background": False}  # fmt: skip
    script = [Reply(tool_calls=[ToolCall("Agent", json.dumps(explore))]), "The folder is empty.",
              Reply(tool_calls=[ToolCall("Write", json.dumps({"file_path": "answer.txt", "content": "apple"}))]),
              "I wrote apple to answer.txt."]  # fmt: skip
    rollout = agl.Rollout("ro-1", "at-1")
    with (
        EmbeddedCollector.on_sqlite_file(tmp_path / "c.sqlite3") as addresses,
        Client(addresses.query) as client,
        collector_tracer(client) as spans,
        OpenAITestServer(replies=script) as replica,
        GatewayServer(PolicyGateway([replica.base_url], tracer=spans.tracer)) as gateway,
    ):
        env = agl.harness_env(agl.ProxyLLM(gateway.base_url, "policy"), rollout, endpoint=addresses.otlp_http)
        (tmp_path / "task").mkdir()
        run = example_agent.run_claude(task["prompt"], env, tmp_path / "task")
        assert spans.flush()
        flat = client.wait_for_rollout("ro-1", min_spans=8)
    assert run.exit_code == 0 and run.result["result"] == "I wrote apple to answer.txt.", run
    assert example_agent.reward(task, tmp_path / "task", run) == 1.0
    assert len(replica.requests) == 4  # main asks Explore; Explore answers; main writes the file; main reports
    harness = [s for s in flat if s["name"] == "claude_code.llm_request"]
    assert len(harness) == 4  # Claude Code's own record of each request (its telemetry, in the rollout)

    explore_only = TraceToTriplet(agent_match="^Explore$").adapt(flat)
    (sample,) = explore_only.triplets
    assert sample.agent_name == "Explore"
    (response_id,) = sample.response_ids
    served = replica.served[response_id]
    assert (sample.prompt_token_ids, sample.response_token_ids) == (served.prompt_token_ids,
                                                                   served.response_token_ids[0])  # fmt: skip
    assert response_id == replica_response_id(replica, 1)  # the second request: the sub-agent's
    assert replica.requests[1].headers.get("x-claude-code-agent-id")

    main = TraceToTriplet(agent_match="^main$").adapt(flat)
    assert [t.agent_name for t in main.triplets] == ["main"] * 3
    assert sorted(r for t in main.triplets for r in t.response_ids) == sorted(
        replica_response_id(replica, i) for i in (0, 2, 3)
    )
    diagnostics = main.diagnostics
    assert (diagnostics.llm_calls, diagnostics.harness_copies) == (4, 4)
    assert diagnostics.agents_seen == ["Explore", "main"]
    copies = [d for d in diagnostics.calls if d.why[0] == "harness"]
    assert len(copies) == 4 and all("holds the token ids" in d.reason for d in copies)
    gateway_spans = [s for s in flat if semconv.AGL_LLM_DIALECT in s["attributes"]]
    assert {s["attributes"][semconv.AGL_LLM_DIALECT] for s in gateway_spans} == {"anthropic.messages"}


def replica_response_id(replica: OpenAITestServer, index: int) -> str:
    """The response id the replica gave its `index`-th request."""
    return list(replica.served)[index]


def test_the_readmes_dry_run_selects_the_sub_agent(claude_code: Path) -> None:
    printed = check_dry_run(EXAMPLE)
    assert "agent_match='^Explore$' selects 1 of 4 calls" in printed


def test_two_grpo_steps_train_the_tokens_claude_code_was_served(claude_code: Path, tmp_path: Path) -> None:
    steps = run_training(EXAMPLE, tmp_path)
    assert len(steps) == 2
    for metrics in steps:
        assert metrics["rollout/succeeded"] == 4 and metrics["rollout/failed"] == 0, metrics
        # every call the gateway served was joined to Claude Code's own span of it, and trained ('^main$': the
        # main thread made them all)
        assert metrics["rollout/gateway_calls"] == metrics["rollout/harness_copies"] == metrics["training/samples"]
        assert metrics["async/logprob_gap_staleness_0"] < 1e-3, metrics  # the rows are the tokens it sampled
