"""`DPO`: Direct Preference Optimization from the traces of the policy's own rollouts (online, iterative), and
`dpo_from_pairs`: once, from pairs exported by `lightning-otel export --shape pairs` (offline).

    trainer = lightning_otel.Trainer(
        n_runners=2,
        algorithm=lightning_otel.DPO("path/to/model", "dpo-out", beta=0.1, learning_rate=1e-5,
                                     schedule=lightning_otel.Schedule(batch_size=4, group_size=4, max_steps=20)),
        adapter={"agent_match": "write"},
    )
    trainer.fit(agent, train_tasks, val_tasks)                          # -> DPOResult; the model is in dpo-out

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
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lightning_otel.export.shapes import PairRule
from lightning_otel.runtime.algorithm import Algorithm, TrainingRun
from lightning_otel.training.dpo.backend import DPOBackend, lora_model
from lightning_otel.training.dpo.trl_dpo import DPOStats, train_dpo
from lightning_otel.training.loop.advantages import UniformWeight
from lightning_otel.training.loop.loop import LoopResult, TrainingLoop
from lightning_otel.training.loop.metrics import MetricsLog
from lightning_otel.training.loop.schedule import Schedule


@dataclass(slots=True)
class DPOResult:
    """Per-step metrics (`steps`), validation reward by step, the pairs trained, where the model is."""

    output_dir: Path | None
    steps: list[dict[str, float]] = field(default_factory=list)
    validation: list[tuple[int, float]] = field(default_factory=list)
    pairs: int = 0
    loop: LoopResult | None = None

    def rewards(self) -> list[float]:
        return [step.get("rollout/reward_mean", math.nan) for step in self.steps]


class DPO(Algorithm):
    """See the module docstring. `schedule`: tasks per step, group size (>= 2: pairs come from a group), steps,
    validation; `beta`, `learning_rate`, `epochs` (per step, over that step's pairs), `batch_size` (pairs per
    optimizer step), `max_length`: TRL's DPOConfig fields (`trl_args`: any other); `lora`: a peft `LoraConfig` (or
    its fields) to train adapters instead of every weight; `pair_rule`: how pairs are formed; `max_tokens` and
    `temperature`: the sampling enforced on the policy's calls while training (`val_temperature` in validation);
    `output_dir`: where the final model is saved (and `step-N` checkpoints on the schedule's `save_every`)."""

    shows_progress: ClassVar[bool] = True

    def __init__(
        self,
        model_path: str | Path,
        output_dir: str | Path | None = None,
        *,
        schedule: Schedule | None = None,
        beta: float = 0.1,
        learning_rate: float = 1e-5,
        epochs: float = 1.0,
        batch_size: int = 8,
        max_length: int | None = 1024,
        lora: Any = None,
        pair_rule: PairRule | None = None,
        max_tokens: int = 64,
        temperature: float = 1.0,
        val_temperature: float = 0.0,
        seed: int = 0,
        trl_args: Mapping[str, Any] | None = None,
        policy_resource: str = "main_llm",
        model_name: str = "agl-policy",
        logger: Sequence[str] = ("console",),
        log_dir: str | Path | None = None,
        on_step: Callable[[int, dict[str, float]], None] | None = None,
        gateway_host: str = "127.0.0.1",
        gateway_port: int = 0,
        max_staleness: int = 0,
    ) -> None:
        self.schedule = schedule or Schedule(batch_size=4, group_size=4, max_steps=20)
        if self.schedule.group_size < 2:
            raise ValueError(f"DPO pairs rollouts of one task: group_size must be >= 2, got {self.schedule.group_size}")
        if beta <= 0:
            raise ValueError(f"beta must be > 0, got {beta}")
        self.model_path, self.output_dir = Path(model_path), Path(output_dir) if output_dir is not None else None
        self.train_args = {"beta": beta, "learning_rate": learning_rate, "epochs": epochs, "batch_size": batch_size,
                           "max_length": max_length, "seed": seed, "trl_args": dict(trl_args or {})}  # fmt: skip
        self.lora, self.pair_rule, self.seed = lora, pair_rule or PairRule(), seed
        self.sampling = {"temperature": temperature, "top_p": 1.0, "max_tokens": max_tokens}
        self.validation_sampling = {"temperature": val_temperature, "top_p": 1.0, "max_tokens": max_tokens}
        self.policy_resource, self.model_name = policy_resource, model_name
        self.logger, self.log_dir, self.on_step = list(logger), Path(log_dir) if log_dir else None, on_step
        self.gateway_host, self.gateway_port, self.max_staleness = gateway_host, gateway_port, max_staleness

    def run(
        self, run: TrainingRun, train_dataset: Sequence[Any] | None, val_dataset: Sequence[Any] | None
    ) -> DPOResult:
        if not train_dataset:
            raise ValueError("DPO needs a non-empty train dataset")
        result = DPOResult(self.output_dir)

        def step_done(step: int, metrics: dict[str, float]) -> None:
            result.steps.append(dict(metrics))
            if self.on_step is not None:
                self.on_step(step, metrics)

        backend = DPOBackend(self.model_path, self.output_dir, pair_rule=self.pair_rule, train_args=self.train_args,
                             lora=self.lora, model_name=self.model_name, seed=self.seed)  # fmt: skip
        config = {"algorithm": "dpo", "model": str(self.model_path), **self.train_args}
        trackers = MetricsLog(self.logger, project="lightning-otel", experiment=run.run_id, log_dir=self.log_dir,
                              config=config)  # fmt: skip
        loop = TrainingLoop(
            backend, schedule=self.schedule, estimator=UniformWeight(), sampling=self.sampling,
            validation_sampling=self.validation_sampling, trackers=trackers, on_step=step_done,
            policy_resource=self.policy_resource, gateway_host=self.gateway_host, gateway_port=self.gateway_port,
            max_staleness=self.max_staleness,
        )  # fmt: skip
        result.loop = loop_result = loop.run(run, list(train_dataset), list(val_dataset or []))
        result.validation = [(r.step, r.metrics.get("val/reward_mean", math.nan)) for r in loop_result.validations]
        result.pairs = backend.counts.pairs
        return result


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
