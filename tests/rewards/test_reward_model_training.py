"""`reward-model train`: TRL's RewardTrainer on the tiny offline model learns the example's preference pairs (held-out
pairwise accuracy measured with the service's scorer), full or LoRA (merged, so the service loads a plain model)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_otel.rewards.scorer import RewardModelScorer
from lightning_otel.training.reward_model.preferences import convert
from lightning_otel.training.reward_model.train import TooFewPairs, split_pairs, train_reward_model

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "agent_grpo"))
import medical_data  # noqa: E402


@pytest.fixture(scope="module")
def refusal_pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The database's answer against a refusal, for every training question: a signal a tiny model learns in
    seconds (the example's full set, with wrong-fact answers, is measured in its README)."""
    folder = tmp_path_factory.mktemp("pairs")
    train, _ = medical_data.split(medical_data.questions())
    raw = folder / "raw.jsonl"
    raw.write_text(
        "".join(
            json.dumps({"question": q["question"], "chosen": q["answer"], "rejected": medical_data.REFUSALS[i % 3]})
            + "\n"
            for i, q in enumerate(train)
        )
    )
    convert(raw, folder / "pairs.jsonl")
    return folder / "pairs.jsonl"


def test_the_cli_trains_a_reward_model_that_beats_chance_on_held_out_questions(
    refusal_pairs: Path, base_model_dir: Path, tmp_path: Path
) -> None:
    output = tmp_path / "rm"
    command = [
        sys.executable,
        "-m",
        "lightning_otel.cli",
        "reward-model",
        "train",
        "--model",
        str(base_model_dir),
        "--data",
        str(refusal_pairs),
        "--output",
        str(output),
        "--epochs",
        "3",
        "--learning-rate",
        "3e-4",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "held-out pairwise accuracy" in result.stdout
    metrics = json.loads((output / "reward_model_metrics.json").read_text())
    assert metrics["heldout_pairs"] >= 10 and metrics["train_pairs"] + metrics["heldout_pairs"] == 57
    assert metrics["accuracy_after"] >= 0.9 > metrics["accuracy_before"], metrics
    assert metrics["losses"][-1] < metrics["losses"][0]
    scorer = RewardModelScorer(output)  # what the service loads
    question = [{"role": "user", "content": "What is zolpidem used to treat?"}]
    right, refusal = scorer.score(
        [
            [*question, {"role": "assistant", "content": "Zolpidem is used to treat insomnia."}],
            [*question, {"role": "assistant", "content": "I cannot answer that."}],
        ]
    )
    assert right > refusal


def test_lora_training_saves_a_merged_model(refusal_pairs: Path, base_model_dir: Path, tmp_path: Path) -> None:
    result = train_reward_model(base_model_dir, refusal_pairs, tmp_path / "rm", epochs=3, learning_rate=2e-3, lora=True)
    assert result.accuracy_after >= 0.9, result.summary()
    assert not list((tmp_path / "rm").glob("adapter_*")), "the service loads a plain model: LoRA must be merged"
    assert (
        RewardModelScorer(tmp_path / "rm").pairwise_accuracy(
            [json.loads(line) for line in refusal_pairs.read_text().splitlines()[:5]]
        )
        >= 0.8
    )


def test_held_out_questions_never_appear_in_training_and_too_few_is_an_error() -> None:
    rows = [{"prompt": [{"role": "user", "content": f"q{i // 3}"}], "chosen": [], "rejected": []} for i in range(30)]
    train, heldout = split_pairs(rows, 0.2, seed=1)
    assert len(heldout) == 6 and not {r["prompt"][0]["content"] for r in train} & {
        r["prompt"][0]["content"] for r in heldout
    }
    with pytest.raises(TooFewPairs):
        split_pairs(rows[:3], 0.5, seed=1)
