"""A TypeScript agent (examples/typescript_agent: the Anthropic SDK, OpenTelemetry's Node SDK), unmodified, trained
through the policy gateway: its agent spans name the calls made under them (the undici instrumentation sends their
traceparent), so `agent_match` selects the writer's calls; and two GRPO steps of VERL on CPU on them, trained on
exactly the tokens the replica sampled."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harnesses.example_runs import EXAMPLES, check_dry_run, npm_ci, run_training

EXAMPLE = EXAMPLES / "typescript_agent"


@pytest.fixture(scope="module")
def typescript_agent() -> Path:
    return npm_ci(EXAMPLE, "tsx", "tsx")


def test_the_readmes_dry_run_selects_the_writer(typescript_agent: Path) -> None:
    printed = check_dry_run(EXAMPLE)
    assert "agents seen: ['planner', 'writer']; agent_match='^writer$' selects 1 of 2 calls" in printed


def test_two_grpo_steps_train_the_writers_calls(typescript_agent: Path, tmp_path: Path) -> None:
    steps = run_training(EXAMPLE, tmp_path)
    assert len(steps) == 2
    for metrics in steps:
        assert metrics["rollout/succeeded"] == 4 and metrics["rollout/failed"] == 0, metrics
        assert metrics["rollout/gateway_calls"] == 8 and metrics["training/samples"] == 4, metrics  # writer's half
        assert metrics["async/logprob_gap_staleness_0"] < 1e-3, metrics  # the rows are the tokens it sampled
