"""Codex, unmodified, trained through the policy gateway (examples/codex): the pinned CLI from the example's lock
file speaks OpenAI's Responses API to the gateway, which names each call's thread from Codex's own header, so
`agent_match` tells the main thread from a sub-agent `spawn_agent` started; and a GRPO step of VERL on CPU on its
calls, trained on exactly the tokens the replica sampled."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harnesses.example_runs import EXAMPLES, check_dry_run, npm_ci, run_training

EXAMPLE = EXAMPLES / "codex"


@pytest.fixture(scope="module")
def codex() -> Path:
    return npm_ci(EXAMPLE, "@openai/codex", "codex")


def test_the_readmes_dry_run_selects_the_sub_agent(codex: Path) -> None:
    printed = check_dry_run(EXAMPLE)
    assert "agents seen: ['main', 'subagent']; agent_match='^subagent$' selects 1 of 5 calls" in printed
    assert "reward 1.00;" in printed  # the scripted shell command wrote answer.txt in Codex's sandbox


def test_two_grpo_steps_train_the_tokens_codex_was_served(codex: Path, tmp_path: Path) -> None:
    steps = run_training(EXAMPLE, tmp_path)
    assert len(steps) == 2
    for metrics in steps:
        assert metrics["rollout/succeeded"] == 4 and metrics["rollout/failed"] == 0, metrics
        assert metrics["rollout/gateway_calls"] == metrics["training/samples"] >= 4, metrics
        # the rows are the tokens it sampled: the learner's log-probs of them are the sampler's
        assert metrics["async/logprob_gap_staleness_0"] < 1e-3, metrics
