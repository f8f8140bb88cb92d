"""Per-call credit on a real CrewAI flow: examples/tinker's twenty-questions flow (player and answerer agents) runs
in a runner process against test servers, its spans go through a real collector, and each of the player's calls
gets its own advantage (`AnchorAdvantage`) on its Tinker datum. (verl cannot share this lane's environment:
CrewAI needs OpenTelemetry >= 1.45.1, the verl lane is pinned to ADK's 1.44; the same samples reach verl's batch
in tests/verl_lane/test_credit_end_to_end.py.)"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import lightning_otel
from lightning_otel.testing import OpenAITestServer
from tests.programs.credit_check import (
    assert_calls_of_a_rollout_differ,
    assert_datums_carry_each_calls_advantage,
    credited_samples,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tinker"
sys.path.insert(0, str(EXAMPLE))  # runners (spawned, same sys.path) import the example's agent from there
from q20_train import q20_rollout, scripted_reply  # noqa: E402

_turns = itertools.count()


def player(body: dict[str, Any]) -> str:
    """Every third reply guesses the secret: some games are won on the first turn, some on a later one, some lost,
    so the first turns of a task's games (one anchor state) differ in return."""
    question = "Is it a penguin?" if next(_turns) % 3 == 0 else "Is it alive?"
    return f"Thought: I now know the final answer\nFinal Answer: {question}"


def test_each_of_the_players_calls_gets_its_own_advantage_on_its_datum() -> None:
    with OpenAITestServer(replies=scripted_reply) as answerer, OpenAITestServer(replies=player) as policy:
        trainer = lightning_otel.Trainer(
            n_runners=1,
            algorithm=lightning_otel.Baseline(batch_size=1, n_rollouts=6),
            adapter={"agent_match": "player"},
            initial_resources={
                "main_llm": lightning_otel.LLM(policy.base_url, "agl-tiny"),
                "answerer_llm": lightning_otel.LLM(answerer.base_url, "scripted-answerer"),
                "q20_max_turns": 3,
            },
            progress=False,
        )
        task = {"task_id": "penguin", "answer": "penguin", "category": "animal", "search": False}
        (batch,) = trainer.fit(q20_rollout, [task]).train
    rewards = set(batch.rewards().values())
    assert rewards == {0.0, 1.0}, rewards  # won and lost games in one group
    samples, metrics = credited_samples(batch)
    assert {s.triplet.agent_name for s in samples} == {"player"}
    assert_calls_of_a_rollout_differ(samples)
    assert metrics["credit/anchor_coverage"] > 0
    assert_datums_carry_each_calls_advantage(samples)
