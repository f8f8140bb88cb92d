"""A reward model in memory: a Hugging Face sequence-classification model with one label (what TRL's
`RewardTrainer` trains) scoring chat conversations whose last turn is the answer. Score = `logits[:, 0]` of the
conversation rendered with the model's own chat template, as TRL trains it; the Bradley-Terry probability that one
answer is preferred is `sigmoid(score_a - score_b)`. Used by `lightning-otel reward-model serve` and to measure a
trained model's pairwise accuracy. Needs torch and transformers."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Message = dict[str, Any]


def preference_probability(chosen: float, rejected: float) -> float:
    """sigmoid(chosen - rejected): the Bradley-Terry probability TRL's loss trains (-log of it)."""
    margin = chosen - rejected
    if margin >= 0:
        return 1.0 / (1.0 + math.exp(-margin))
    exp = math.exp(margin)
    return exp / (1.0 + exp)


class NotARewardModel(ValueError):
    """The folder holds no trained score head (a plain causal LM, say): its scores would be random."""


class RewardModelScorer:
    """`RewardModelScorer(path).score([[{"role": "user", ...}, {"role": "assistant", ...}], ...])` -> floats."""

    def __init__(
        self, path: str | Path, *, max_length: int = 1024, device: str | None = None, batch_size: int = 16
    ) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.path = str(path)
        self.name = Path(path).name
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "right"  # the classification head reads the last non-pad token
        self.model, loading = AutoModelForSequenceClassification.from_pretrained(
            self.path, num_labels=1, output_loading_info=True
        )
        new_head = [key for key in loading.get("missing_keys", ()) if key.split(".")[0] in ("score", "classifier")]
        if new_head:  # transformers would make a random head and every score would be noise
            raise NotARewardModel(
                f"{self.path} has no trained score head ({', '.join(new_head)} missing): it is not a reward model. "
                "Train one: lightning-otel reward-model train --model THIS_FOLDER --data pairs.jsonl --output rm/"
            )
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model.to(self.device).eval()
        self._lock = threading.Lock()  # one forward at a time: the server batches concurrent requests instead

    def render(self, messages: Sequence[Message]) -> str:
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False)

    def score(self, conversations: Sequence[Sequence[Message]]) -> list[float]:
        return self.score_texts([self.render(conversation) for conversation in conversations])

    def score_texts(self, texts: Sequence[str]) -> list[float]:
        """Texts already rendered with the chat template (what verl's reward loop sends to `/classify`)."""
        encoded = [
            self.tokenizer(text, add_special_tokens=False, truncation=True, max_length=self.max_length)["input_ids"]
            for text in texts
        ]
        return self.score_token_ids(encoded)

    def score_token_ids(self, sequences: Sequence[Sequence[int]]) -> list[float]:
        import torch

        scores: list[float] = []
        pad = self.model.config.pad_token_id  # what the head reads as padding (it finds the last non-pad token)
        with self._lock, torch.no_grad():
            for start in range(0, len(sequences), self.batch_size):
                chunk = [list(ids)[: self.max_length] for ids in sequences[start : start + self.batch_size]]
                if any(not ids for ids in chunk):
                    raise ValueError("cannot score an empty sequence")
                width = max(len(ids) for ids in chunk)
                input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids in chunk], device=self.device)
                mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in chunk], device=self.device)
                logits = self.model(input_ids=input_ids, attention_mask=mask).logits
                scores.extend(float(value) for value in logits[:, 0].float().cpu())
        return scores

    def pairwise_accuracy(self, rows: Sequence[dict[str, Any]]) -> float:
        """Share of preference rows (TRL's explicit-prompt format) whose chosen answer scores higher."""
        if not rows:
            return math.nan
        chosen = self.score([[*row["prompt"], *row["chosen"]] for row in rows])
        rejected = self.score([[*row["prompt"], *row["rejected"]] for row in rows])
        return sum(c > r for c, r in zip(chosen, rejected, strict=True)) / len(rows)
