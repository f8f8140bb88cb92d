"""TRL's `DPOTrainer` on preference pairs of exact token ids: the tokens the policy sampled, never re-tokenized text.

TRL 0.29's DPOTrainer always builds `prompt_ids`/`chosen_ids`/`rejected_ids` by applying the chat template to text
(`DPOTrainer._prepare_dataset`, a private method); its collator and loss then use only those three columns. Our
pairs already hold them, so `_prepare_dataset` is skipped by a subclass, on the TRL releases this was tested with
(`capture/tested_versions.py`); on any other release DPO refuses with the install line rather than train on
tokens the policy never produced.
"""

from __future__ import annotations

import math
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_otel.capture.tested_versions import TESTED, installed_version, is_tested
from lightning_otel.training.trl_device import trl_device_options

PAIR_ID_COLUMNS = ("prompt_token_ids", "chosen_token_ids", "rejected_token_ids")  # the export's names


@dataclass(slots=True)
class DPOStats:
    """What one DPO pass did: pairs trained, losses and TRL's implicit-reward metrics (means over logged steps)."""

    pairs: int = 0
    pairs_without_token_ids: int = 0
    losses: list[float] = field(default_factory=list)
    accuracy: float = math.nan  # share of pairs whose chosen side the policy prefers more than the reference does
    margin: float = math.nan  # beta * (chosen log-ratio - rejected log-ratio)
    seconds: float = 0.0

    def metrics(self, prefix: str = "dpo") -> dict[str, float]:
        return {
            f"{prefix}/pairs": float(self.pairs),
            f"{prefix}/pairs_without_token_ids": float(self.pairs_without_token_ids),
            f"{prefix}/loss": statistics.fmean(self.losses) if self.losses else math.nan,
            f"{prefix}/accuracy": self.accuracy,
            f"{prefix}/margin": self.margin,
            f"{prefix}/train_s": self.seconds,
        }


def token_rows(pairs: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, list[int]]], int]:
    """Pairs (the export's rows) -> TRL's `prompt_ids`/`chosen_ids`/`rejected_ids` rows; pairs lacking token ids
    are counted and left out."""
    rows, missing = [], 0
    for pair in pairs:
        prompt, chosen, rejected = (pair.get(name) for name in PAIR_ID_COLUMNS)
        if not prompt or not chosen or not rejected:
            missing += 1
            continue
        rows.append({"prompt_ids": list(prompt), "chosen_ids": list(chosen), "rejected_ids": list(rejected)})
    return rows, missing


def _token_id_trainer() -> Any:
    from trl import DPOTrainer

    if not is_tested("trl"):
        tested = ", ".join(sorted(TESTED["trl"]))
        raise RuntimeError(
            f"DPO trains on the sampled token ids by skipping DPOTrainer._prepare_dataset, tested on trl {tested}; "
            f"trl {installed_version('trl')} is installed: pip install 'trl>=0.29,<0.30'"
        )

    class TokenIdDPOTrainer(DPOTrainer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # Given a PeftModel and no ref_model, TRL copies its adapter as the reference ("ref", for an adapter
            # trained before). Ours start at zero, so the reference is the base model: adapters disabled, TRL's path
            # when there is no "ref", the same at every step as full fine-tuning's frozen copy; left in place, the
            # copy made the next step's trainer fail ("Adapter with name 'ref' already exists").
            model = self.accelerator.unwrap_model(self.model)
            if "ref" in (getattr(model, "peft_config", None) or {}) and kwargs.get("ref_model") is None:
                model.delete_adapter("ref")

        def _prepare_dataset(self, dataset: Any, processing_class: Any, args: Any, dataset_name: str) -> Any:
            return dataset  # prompt_ids/chosen_ids/rejected_ids already: the tokens as sampled

    return TokenIdDPOTrainer


def train_dpo(
    model: Any,
    tokenizer: Any,
    pairs: Sequence[Mapping[str, Any]],
    *,
    ref_model: Any = None,
    beta: float = 0.1,
    learning_rate: float = 1e-5,
    epochs: float = 1.0,
    batch_size: int = 8,
    max_length: int | None = 1024,
    seed: int = 0,
    use_cpu: bool | None = None,
    trl_args: Mapping[str, Any] | None = None,
    on_log: Callable[[dict[str, float]], None] | None = None,
) -> DPOStats:
    """One DPO pass of `model` over `pairs` (the export's pair rows: prompt/chosen/rejected token ids) against
    `ref_model` (None with a PEFT model: its adapters disabled; otherwise TRL loads the model's own path). The model
    is trained in place."""
    import time

    import torch
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import DPOConfig

    stats = DPOStats()
    rows, stats.pairs_without_token_ids = token_rows(pairs)
    stats.pairs = len(rows)
    if not rows:
        return stats
    logged: list[dict[str, float]] = []

    class Log(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **_: Any) -> None:
            if logs and "loss" in logs:
                logged.append(dict(logs))
                if on_log is not None:
                    on_log(dict(logs, step=float(state.global_step)))

    cpu = not torch.cuda.is_available() if use_cpu is None else use_cpu
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="agl-dpo-") as scratch:
        options: dict[str, Any] = {
            "output_dir": scratch,
            "beta": beta,
            "learning_rate": learning_rate,
            "num_train_epochs": epochs,
            "per_device_train_batch_size": batch_size,
            "max_length": max_length,
            "seed": seed,
            "logging_steps": 1,
            "save_strategy": "no",
            "report_to": [],
            "disable_tqdm": True,
            "dataloader_num_workers": 0,
            "remove_unused_columns": False,
            **trl_device_options(cpu),
        }
        config = DPOConfig(**{**options, **(trl_args or {})})
        trainer = _token_id_trainer()(
            model=model, ref_model=ref_model, args=config, train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer, callbacks=[Log()],
        )  # fmt: skip
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    stats.seconds = time.monotonic() - started
    stats.losses = [float(entry["loss"]) for entry in logged]
    accuracies = [float(entry["rewards/accuracies"]) for entry in logged if "rewards/accuracies" in entry]
    margins = [float(entry["rewards/margins"]) for entry in logged if "rewards/margins" in entry]
    stats.accuracy = statistics.fmean(accuracies) if accuracies else math.nan
    stats.margin = statistics.fmean(margins) if margins else math.nan
    return stats
