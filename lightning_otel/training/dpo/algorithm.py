"""`DPO`: Direct Preference Optimization from the traces of the policy's own rollouts (online, iterative), and
`dpo_from_pairs`: once, from pairs exported by `lightning-otel export --shape pairs` (offline).

    trainer = lightning_otel.Trainer(
        n_runners=2,
        algorithm=lightning_otel.DPO(
            "path/to/model", "dpo-out",
            lightning_otel.TrainingOptions(schedule=lightning_otel.Schedule(batch_size=4, group_size=4, max_steps=20)),
            beta=0.1, learning_rate=1e-5,
        ),
        adapter={"agent_match": "write"},
    )
    trainer.fit(agent, train_tasks, val_tasks)                      # -> TrainingResult; the model is in dpo-out

    lightning_otel.dpo_from_pairs("pairs.parquet", "path/to/model", "dpo-offline")

Each step of the training loop (`lightning_otel.training.loop`) queues the step's tasks `group_size` times; the
runners' agents call the policy through the loop's gateway (a CPU replica of the model being trained); the spans
give each call's exact token ids; `agent_match` selects the calls; within each group (one task, this step) the
`pair_rule` pairs a higher- with a lower-reward rollout at the calls where both saw the same prompt (the export's
rule: `lightning_otel.PairRule`); TRL's DPOTrainer trains on those token ids against the starting policy (a frozen
copy, or the base model under LoRA adapters); the replica loads the new weights, which the next step samples. A
step whose groups give no pair (all rewards equal) is skipped and says so; a run with no pair at all raises
`NothingTrained`. Needs the `[sft]` extra (trl, datasets, torch; peft for LoRA).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from lightning_otel.export.shapes import PairRule
from lightning_otel.runtime.algorithm import Algorithm
from lightning_otel.runtime.training_run import TrainingRun
from lightning_otel.training.dpo.backend import DPOBackend, lora_model
from lightning_otel.training.dpo.trl_dpo import DPOStats, train_dpo
from lightning_otel.training.loop.loop import TrainingLoop
from lightning_otel.training.loop.options import TrainingOptions, with_moved_arguments
from lightning_otel.training.loop.result import TrainingResult
from lightning_otel.training.loop.schedule import Schedule

# What `TrainingOptions` fields left unset mean for DPO: 4 tasks a step, each run 4 times (a pair needs two rollouts
# of a task), 20 steps.
DEFAULT_SCHEDULE = Schedule(batch_size=4, group_size=4, max_steps=20)


class DPO(Algorithm):
    """See the module docstring. `options`: the loop's settings (`TrainingOptions`: the schedule, whose group size
    must be >= 2 as pairs come from a group, and whose `seed` seeds the replica's sampling and TRL; the sampling
    enforced on the policy's calls; trackers, on_step, max_staleness, ...); the advantage setting does not apply:
    pairs are formed by reward. `beta`, `learning_rate`, `epochs` (per step, over that step's pairs), `batch_size`
    (pairs per optimizer step): TRL's DPOConfig fields (`trl_args`: any other, `max_length` among them, 1024 here);
    `lora`: a peft `LoraConfig` (or its fields) to train adapters instead of every weight; `pair_rule`: how pairs
    are formed; `output_dir`: where the final model is saved (and `step-N` checkpoints on the schedule's
    `save_every`); `model_name`: the name the policy is served under."""

    shows_progress: ClassVar[bool] = True

    def __init__(
        self,
        model_path: str | Path,
        output_dir: str | Path | None = None,
        options: TrainingOptions | None = None,
        *,
        beta: float = 0.1,
        learning_rate: float = 1e-5,
        epochs: float = 1.0,
        batch_size: int = 8,
        lora: Any = None,
        pair_rule: PairRule | None = None,
        trl_args: Mapping[str, Any] | None = None,
        model_name: str = "agl-policy",
        **moved: Any,
    ) -> None:
        options = with_moved_arguments("DPO", options, moved)
        self.options = options.with_defaults(schedule=DEFAULT_SCHEDULE).with_sampling_defaults()
        schedule = self.options.schedule or DEFAULT_SCHEDULE
        if schedule.group_size < 2:
            raise ValueError(f"DPO pairs rollouts of one task: group_size must be >= 2, got {schedule.group_size}")
        if options.advantage != "grpo":
            raise ValueError("DPO pairs rollouts by their rewards: TrainingOptions.advantage does not apply to it")
        if beta <= 0:
            raise ValueError(f"beta must be > 0, got {beta}")
        self.model_path, self.output_dir = Path(model_path), Path(output_dir) if output_dir is not None else None
        self.train_args = {"beta": beta, "learning_rate": learning_rate, "epochs": epochs, "batch_size": batch_size,
                           "max_length": 1024, "seed": schedule.seed, "trl_args": dict(trl_args or {})}  # fmt: skip
        self.lora, self.pair_rule, self.model_name = lora, pair_rule or PairRule(), model_name
        self.backend: DPOBackend | None = None  # the run's, while it runs and after (its pair counts)

    def run(
        self, run: TrainingRun, train_dataset: Sequence[Any] | None, val_dataset: Sequence[Any] | None
    ) -> TrainingResult:
        if not train_dataset:
            raise ValueError("DPO needs a non-empty train dataset")
        schedule = self.options.schedule or DEFAULT_SCHEDULE
        self.backend = backend = DPOBackend(
            self.model_path, self.output_dir, pair_rule=self.pair_rule, train_args=self.train_args, lora=self.lora,
            model_name=self.model_name, seed=schedule.seed,
        )  # fmt: skip
        config = {"algorithm": "dpo", "model": str(self.model_path), **self.train_args}
        loop = TrainingLoop(backend, self.options, run_config=config)
        return loop.run(run, list(train_dataset), list(val_dataset or []))


def read_pairs(source: str | Path | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pairs from `lightning-otel export --shape pairs`: a .jsonl or .parquet file, a datasets folder, or rows."""
    if not isinstance(source, (str, Path)):
        return [dict(row) for row in source]
    path = Path(source)
    if path.is_dir():
        from datasets import load_from_disk

        return load_from_disk(str(path)).to_list()
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def dpo_from_pairs(
    pairs: str | Path | Sequence[Mapping[str, Any]],
    model_path: str | Path,
    output_dir: str | Path,
    *,
    lora: Any = None,
    **train_args: Any,
) -> DPOStats:
    """Offline DPO: train the model at `model_path` on exported pairs (their token ids) and save it to
    `output_dir`; `train_args` as `train_dpo` takes them (beta, learning_rate, epochs, batch_size, ...)."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = read_pairs(pairs)
    if not rows:
        raise ValueError(f"no pair in {pairs if isinstance(pairs, (str, Path)) else 'the rows given'}")
    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    reference = None
    if lora is not None:
        model = lora_model(model, lora)
    else:
        reference = copy.deepcopy(model).eval().requires_grad_(False)
    stats = train_dpo(model, tokenizer, rows, ref_model=reference, **train_args)
    if stats.pairs == 0:
        raise ValueError(f"none of the {len(rows)} pairs has token ids (prompt/chosen/rejected_token_ids)")
    saved = model.merge_and_unload() if lora is not None else model
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    saved.save_pretrained(str(output_dir))
    tokenizer.save_pretrained(str(output_dir))
    return stats
