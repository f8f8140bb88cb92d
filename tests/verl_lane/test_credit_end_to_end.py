"""Per-call credit on a real LangGraph graph: the SQL graph (write -> check -> rewrite) runs in a runner process
against the test server, its spans go through a real collector, and each selected call's own advantage
(`AnchorAdvantage`) reaches verl's batch (built with verl's real DataProto) and the Tinker datums."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import lightning_otel
from lightning_otel.testing import OpenAITestServer, build_tokenizer
from lightning_otel.training.verl.batch import BatchShape, build_batch
from tests.programs.credit_check import (
    assert_calls_of_a_rollout_differ,
    assert_datums_carry_each_calls_advantage,
    assert_verl_rows_carry_each_calls_advantage,
    credited_samples,
)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `examples.sql_agent.graph_agent`, as runners (spawned, same sys.path) import it

from examples.sql_agent.graph_agent import sql_graph_rollout  # noqa: E402

TASKS = [{"id": "q0", "question": "customers per city"}, {"id": "q1", "question": "top sales"}]
_drafts: collections.Counter[str] = collections.Counter()  # per draft prompt, i.e. per task


def replies(body: dict) -> str:
    """Every other draft of a task is lower case: the checker rejects it and the rewrite fixes half of it, so
    rollouts of one task score differently and their first calls (one anchor state) get different step advantages.
    Counted per task: with one count for all, the tasks' rollouts taking turns gave one task every upper-case draft."""
    text = body["messages"][-1]["content"]
    if text.startswith("Check"):
        return "The query is wrong: use capitals." if "select" in text else "Looks right."
    if text.startswith("Rewrite"):
        return "SELECT name from t;"
    _drafts[text] += 1
    return "select name from t;" if _drafts[text] % 2 else "SELECT NAME FROM T;"


def test_each_calls_advantage_reaches_the_verl_batch_and_the_tinker_datums() -> None:
    with OpenAITestServer(replies=replies) as server:
        trainer = lightning_otel.Trainer(
            n_runners=1,
            algorithm=lightning_otel.Baseline(batch_size=len(TASKS), n_rollouts=4),
            adapter={"agent_match": "write"},  # write and rewrite
            initial_resources={"main_llm": lightning_otel.LLM(server.base_url, "agl-tiny")},
            progress=False,
        )
        (batch,) = trainer.fit(sql_graph_rollout, TASKS).train
    samples, metrics = credited_samples(batch)
    assert {s.triplet.agent_name for s in samples} == {"write", "rewrite"}
    assert_calls_of_a_rollout_differ(samples)
    assert 0 < metrics["credit/anchor_coverage"] <= 1
    assert_datums_carry_each_calls_advantage(samples)
    tokenizer = build_tokenizer()
    shape = BatchShape(max_prompt_length=128, max_response_length=32, pad_token_id=tokenizer.eos_token_id)
    verl_batch, stats = build_batch(samples, shape)
    assert stats.rows == len(samples) and stats.dropped_long_prompts == stats.truncated_responses == 0
    assert_verl_rows_carry_each_calls_advantage(samples, verl_batch)
