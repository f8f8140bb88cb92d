"""The spider example as its README runs it: the dry run against the scripted teacher, 2 GRPO steps of its own agent
on CPU with its real prompts, and the SFT warm start from traces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPIDER = ROOT / "examples" / "spider"


def run_example(*args: str, data: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, VERL_SPIDER_DATA_DIR=str(data))
    return subprocess.run(
        [sys.executable, "train_sql_agent.py", *args],
        cwd=SPIDER, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spider-data")


def test_the_dry_run_answers_ten_questions_with_the_scripted_teacher(data: Path) -> None:
    done = run_example("qwen", "--dev", data=data, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "data from the offline Spider-format generator" in done.stdout  # built on first use
    assert "dry run: 10 rollouts, execution accuracy 1.00" in done.stdout
    assert "samples selected by agent_match='write'" in done.stdout


def test_two_grpo_steps_of_the_examples_agent_train_only_write_and_rewrite_rows(data: Path, tmp_path: Path) -> None:
    done = run_example("cpu", "--ci-fast", "--workdir", str(tmp_path), data=data)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [step["step"] for step in summary["steps"]] == [1, 2]
    for step in summary["steps"]:
        metrics = step["metrics"]
        assert metrics["training/skipped_step"] == 0 and metrics["batch/rows"] >= 4  # 2 tasks x n=2, >= 1 row each
        assert set(step["sample_agents"]) <= {"write_query", "rewrite_query"} and step["sample_agents"]
        # --ci-fast turns bypass mode off to check its premise: the actor's log-probs equal the replica's
        assert metrics["training/rollout_probs_diff_max"] < 1e-5
        assert step["sample_agents"].get("write_query") == 4  # one turn, its check skipped: one row per rollout
        assert metrics["rollout/succeeded"] == metrics["rollout/rollouts"] == 4
        # the agent's real prompt: the schema with sample rows, ~300 tokens with the example's tokenizer
        assert metrics["prompt_length/mean"] > 200


def _sft_run(data: Path, tmp_path: Path, **options: object):
    """SFT on 6 training questions answered by the scripted teacher; returns the result or the exception."""
    sys.path.insert(0, str(SPIDER))
    from prepare_dataset import data_ready, prepare
    from sql_agent import LitSQLAgent
    from train_sql_agent import load_split
    from warm_start import build_policy, teacher_endpoint

    import lightning_otel

    if not data_ready(data):
        prepare(data)
    tasks = load_split(data, "train_spider.parquet")[:6]
    model = build_policy(tmp_path / "init", tasks, data, hidden_size=32, layers=2, seed=0)
    capture = options.pop("capture_content", None)
    algorithm = lightning_otel.SFT(model, tmp_path / "sft", epochs=2, batch_size=4, **options)
    with teacher_endpoint(None, tasks) as url:
        trainer = lightning_otel.Trainer(
            n_runners=1,
            algorithm=algorithm,
            adapter={"agent_match": None},
            initial_resources={"main_llm": lightning_otel.LLM(url, "teacher")},
            progress=False,
            runner_options=lightning_otel.RunnerOptions(capture_content=capture),
        )
        return trainer.fit(LitSQLAgent(data_dir=data), tasks)


def test_sft_fine_tunes_on_the_calls_of_rewarded_rollouts(data: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lightning_otel.training.sft import EXAMPLES_FILE, read_examples

    result = _sft_run(data, tmp_path, learning_rate=1e-2, trl_args={"logging_steps": 1})
    done = result.final
    assert done["sft/rollouts"] == done["sft/kept_rollouts"] == 6 and done["sft/teacher_reward_mean"] == 1.0
    examples = read_examples(tmp_path / "sft" / EXAMPLES_FILE)
    assert done["sft/examples"] == len(examples) == 12  # write_query and check_query of each rollout
    first = examples[0]["messages"]
    assert [m["role"] for m in first] == ["system", "user", "assistant"]
    assert first[-1]["content"].startswith("```sqlite\nSELECT")
    assert done["sft/last_loss"] < done["sft/first_loss"]
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "sft")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "sft")
    assert model.config.vocab_size == len(tokenizer)


def test_sft_says_why_it_has_nothing_to_learn_from(data: Path, tmp_path: Path) -> None:
    import lightning_otel

    with pytest.raises(lightning_otel.NoDemonstrations, match=r"6 rollouts, 0 with reward >= 2\.0"):
        _sft_run(data, tmp_path / "a", min_reward=2.0)
    with pytest.raises(lightning_otel.NoDemonstrations, match="12 selected calls had no message content"):
        _sft_run(data, tmp_path / "b", capture_content=False)
