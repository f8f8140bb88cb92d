"""VERL on CPU trains SmolLM2-135M-Instruct (a Llama, a real tokenizer and chat template): one GRPO step of the
demo's two agents, whose trained rows are exactly the tokens the CPU replica sampled (the actor's logprobs of them
equal the sampler's), with SmolLM2's template on every prompt and its end-of-turn token ending the replies."""

from __future__ import annotations

from pathlib import Path

import pytest

import lightning_otel
from lightning_otel import semconv
from lightning_otel.cli.train_demo import POLICIES, TASKS, demo_config, shout_rollout
from lightning_otel.collector import Client, EmbeddedCollector
from tests.models.smollm2_calls import checked_calls


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    return lightning_otel.smollm2(say=False)


def test_one_grpo_step_of_verl_on_smollm2_trains_the_sampled_tokens(smollm2_dir: Path, tmp_path: Path) -> None:
    config = demo_config(smollm2_dir, 1, tmp_path, POLICIES["smollm2"])
    config["data"]["train_batch_size"] = 2
    config["actor_rollout_ref"]["rollout"]["n"] = 2
    config["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] = 2
    with EmbeddedCollector.on_sqlite_file(tmp_path / "c.sqlite3") as addresses:
        trainer = lightning_otel.Trainer(
            n_runners=1,
            algorithm=lightning_otel.VERL(config, device="cpu"),
            adapter={"agent_match": "write"},
            initial_resources={"main_llm": lightning_otel.LLM("http://replaced-by-the-gateway/v1", "policy")},
            collector=addresses.query,
            progress=False,
            runner_options=lightning_otel.RunnerOptions(capture_content=True),
        )  # fmt: skip
        (step,) = trainer.fit(shout_rollout, TASKS[:2]).steps
        with Client(addresses.query) as client:
            spans = client.rollouts_spans(step.rollout_ids, latest=True)
    metrics = step.metrics
    assert metrics["rollout/succeeded"] == 4 and metrics["training/samples"] == 4 and not step.skipped_because
    assert metrics["training/rollout_probs_diff_max"] < 1e-3, metrics  # the rows are the sampled tokens
    assert metrics["actor/grad_norm"] > 0
    calls = checked_calls(spans, smollm2_dir)
    assert len(calls) == 8  # write and check, four rollouts
    assert all(span["attributes"][semconv.AGL_POLICY_VERSION] == 0 for span in calls.values())
