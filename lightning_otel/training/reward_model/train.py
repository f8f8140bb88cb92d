"""Train a reward model from preference pairs with TRL's `RewardTrainer` (`lightning-otel reward-model train`).

A sequence-classification head with one label on a causal LM (the same model family as the policy, or the tiny
offline one on CPU), trained on TRL's preference rows (`convert` writes them) with the Bradley-Terry loss
`-log sigmoid(r_chosen - r_rejected [- margin])`. A seeded share of the pairs is held out; the pairwise accuracy
on them (share of pairs whose chosen answer scores higher) is measured before and after training with the same
scorer the service uses, so the number reported is the one the service will give. LoRA is optional (merged into
the saved model, so the service loads a plain model). Needs the `[sft]` extra (trl, datasets, torch, peft for LoRA).
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lightning_otel.training.trl_device import trl_device_options

log = logging.getLogger("lightning_otel.reward_model")

METRICS_FILE = "reward_model_metrics.json"


class TooFewPairs(ValueError):
    """Not enough preference pairs to train and hold some out."""


@dataclass(slots=True)
class RewardModelResult:
    output_dir: str
    train_pairs: int
    heldout_pairs: int
    dropped_too_long: int  # pairs TRL filtered out for exceeding max_length
    accuracy_before: float  # held-out pairwise accuracy of the untrained head
    accuracy_after: float
    losses: list[float] = field(default_factory=list)
    train_accuracy_after: float = float("nan")
    train_seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"reward model -> {self.output_dir}: {self.train_pairs} training pairs ({self.dropped_too_long} dropped "
            f"as too long), {self.heldout_pairs} held out; held-out pairwise accuracy {self.accuracy_before:.3f} "
            f"before -> {self.accuracy_after:.3f} after (chance 0.5); {self.train_seconds:.0f}s"
        )


def load_pairs(path: str | Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict) or not {"chosen", "rejected"} <= set(row):
            raise ValueError(f"{path}:{number}: not a preference row (run `lightning-otel reward-model convert`)")
        rows.append(row)
    return rows


def split_pairs(rows: list[dict[str, Any]], heldout_fraction: float, seed: int) -> tuple[list, list]:
    """Held-out pairs by question, so no question is both trained on and measured."""
    keys = [json.dumps(row.get("prompt"), sort_keys=True) for row in rows]  # a question, whatever its pairs
    questions = sorted(set(keys))
    random.Random(seed).shuffle(questions)
    heldout_count = max(1, round(len(questions) * heldout_fraction)) if heldout_fraction > 0 else 0
    if len(questions) - heldout_count < 1:
        raise TooFewPairs(
            f"{len(rows)} pairs over {len(questions)} questions: too few to hold {heldout_fraction:.0%} out"
        )
    heldout = set(questions[:heldout_count])
    train = [row for row, key in zip(rows, keys, strict=True) if key not in heldout]
    return train, [row for row, key in zip(rows, keys, strict=True) if key in heldout]


def train_reward_model(
    model: str | Path,
    pairs: str | Path,
    output_dir: str | Path,
    *,
    epochs: float = 3.0,
    learning_rate: float = 5e-5,
    batch_size: int = 8,
    heldout_fraction: float = 0.2,
    lora: bool = False,
    lora_rank: int = 16,
    max_length: int = 1024,
    seed: int = 0,
) -> RewardModelResult:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    from lightning_otel.rewards.scorer import RewardModelScorer

    output = Path(output_dir)
    rows = load_pairs(pairs)
    train_rows, heldout_rows = split_pairs(rows, heldout_fraction, seed)
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    torch.manual_seed(seed)
    network = AutoModelForSequenceClassification.from_pretrained(str(model), num_labels=1)
    network.config.pad_token_id = tokenizer.pad_token_id
    # The head is random: save it untrained once, to measure the starting accuracy with the service's own scorer.
    output.mkdir(parents=True, exist_ok=True)
    network.save_pretrained(output)
    tokenizer.save_pretrained(output)
    before = RewardModelScorer(output, max_length=max_length).pairwise_accuracy(heldout_rows)
    config = RewardConfig(
        output_dir=str(output / "trainer"),
        num_train_epochs=epochs,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        max_length=max_length,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=seed,
        dataloader_pin_memory=False,
        **trl_device_options(cpu=not torch.cuda.is_available()),
    )
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(task_type="SEQ_CLS", r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0)
    trainer = RewardTrainer(
        model=network,
        args=config,
        train_dataset=Dataset.from_list(train_rows),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    dropped = len(train_rows) - len(trainer.train_dataset)
    if dropped:
        log.warning(
            "%d of %d training pairs are longer than max_length=%d and were dropped",
            dropped,
            len(train_rows),
            max_length,
        )
    started = time.monotonic()
    trainer.train()
    seconds = time.monotonic() - started
    trained = trainer.model
    if lora:
        trained = trained.merge_and_unload()  # the service loads a plain model
    trained.save_pretrained(output)
    tokenizer.save_pretrained(output)
    scorer = RewardModelScorer(output, max_length=max_length)
    result = RewardModelResult(
        output_dir=str(output),
        train_pairs=len(trainer.train_dataset),
        heldout_pairs=len(heldout_rows),
        dropped_too_long=dropped,
        accuracy_before=before,
        accuracy_after=scorer.pairwise_accuracy(heldout_rows),
        losses=[entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
        train_accuracy_after=scorer.pairwise_accuracy(train_rows),
        train_seconds=seconds,
    )
    (output / METRICS_FILE).write_text(json.dumps(asdict(result), indent=1))
    return result
