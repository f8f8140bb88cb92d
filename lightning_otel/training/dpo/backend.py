"""DPO as a backend of the training loop: the policy served by a CPU replica (vLLM's format, behind the loop's
gateway, to the same runners every backend uses), each step's pairs trained with TRL's DPOTrainer, the new
weights loaded into the replica between batches."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_otel.export.shapes import PairCounts, PairRule
from lightning_otel.training.dpo.pairs import sample_pairs
from lightning_otel.training.dpo.trl_dpo import DPOStats, train_dpo
from lightning_otel.training.loop.advantages import AdvantageEstimator, UniformWeight
from lightning_otel.training.loop.backend import Backend, NothingToUpdate, PolicyReplicas
from lightning_otel.training.loop.samples import Sample


class TiedOutputLayer(ValueError):
    """LoRA on an output layer its model ties to the input embeddings: merged for serving, it moves them too."""


def lora_model(model: Any, lora: Any) -> Any:
    """`model` with LoRA adapters (`lora`: a peft `LoraConfig` or its fields as a dict). An adapter on an output
    layer that is tied to the embeddings (SmolLM2's) is refused: the replica is served the merged weights, and
    merging it would change the embeddings too, so the policy served would not be the policy trained."""
    from peft import LoraConfig, get_peft_model

    config = lora if isinstance(lora, LoraConfig) else LoraConfig(task_type="CAUSAL_LM", **dict(lora))
    output = model.get_output_embeddings()
    tied = output is not None and output.weight is model.get_input_embeddings().weight
    peft_model = get_peft_model(model, config)
    if tied and any("lora_" in name and ".lm_head." in f".{name}" for name, _ in peft_model.named_parameters()):
        raise TiedOutputLayer(
            "LoRA on the output layer (lm_head) of a model that ties it to its input embeddings: the merged policy "
            "the replica serves would move the embeddings too. Leave lm_head out of target_modules (or load the "
            "model untied)"
        )
    return peft_model


def plain_weights(model: Any) -> dict[str, Any]:
    """The weights a plain model of the base architecture loads: LoRA merged into a copy when there are adapters."""
    if hasattr(model, "merge_and_unload"):
        return copy.deepcopy(model).merge_and_unload().state_dict()
    return model.state_dict()


class DPOBackend(Backend):
    """`model_path`: a Hugging Face causal LM folder (with its tokenizer); `train_args` go to `train_dpo` (beta,
    learning_rate, epochs, batch_size, max_length, seed, trl_args). The reference is the starting policy: a frozen
    copy, or with LoRA the model with its adapters disabled."""

    name = "dpo"

    def __init__(
        self,
        model_path: str | Path,
        output_dir: str | Path | None,
        *,
        pair_rule: PairRule,
        train_args: Mapping[str, Any],
        lora: Any = None,
        model_name: str = "agl-policy",
        seed: int = 0,
    ) -> None:
        self.model_path, self.output_dir = str(model_path), Path(output_dir) if output_dir is not None else None
        self.pair_rule, self.train_args, self.lora = pair_rule, dict(train_args), lora
        self.model_name, self.seed = model_name, seed
        self.model: Any = None
        self.ref_model: Any = None
        self.tokenizer: Any = None
        self.replica: Any = None
        self.counts = PairCounts()
        self.history: list[DPOStats] = []
        self._trained_since_publish = False

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
        if self.lora is not None:
            self.model = lora_model(model, self.lora)
        else:
            self.model = model
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)

    @contextlib.contextmanager
    def serving(self) -> Iterator[PolicyReplicas]:
        import torch
        from transformers import AutoModelForCausalLM

        from lightning_otel.serving.cpu_replica import CPUReplica, HFChatTokenizer, ReplicaServer

        self._load()
        served = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
        self.replica = CPUReplica(served, HFChatTokenizer(self.tokenizer), model_name=self.model_name, seed=self.seed)
        with ReplicaServer(self.replica) as server:
            yield PolicyReplicas([server.base_url], self.model_name)

    def estimator(self, advantage: str | AdvantageEstimator) -> AdvantageEstimator:
        """Every selected call weighs alike: `update` pairs them by their rollouts' rewards (and says when no group
        gives a pair)."""
        return UniformWeight()

    def idle_metrics(self) -> dict[str, float]:
        return {"dpo/pairs": 0.0}

    def update(self, samples: Sequence[Sample], step: int) -> dict[str, float]:
        counts = PairCounts()
        pairs, merged = sample_pairs(samples, self.pair_rule, counts)
        metrics = {
            "dpo/pairs": float(len(pairs)),
            "dpo/rollout_pairs": float(counts.rollout_pairs),
            "dpo/prompts_differ": float(counts.prompts_differ),
            "dpo/identical_replies": float(counts.identical_replies),
            "dpo/merged_samples": float(merged),
        }
        for name in ("rollout_pairs", "prompts_differ", "identical_replies", "pairs"):
            setattr(self.counts, name, getattr(self.counts, name) + getattr(counts, name))
        if not pairs:
            raise NothingToUpdate([why_no_pair(samples, counts, self.pair_rule.margin)], metrics)
        stats = train_dpo(self.model, self.tokenizer, pairs, ref_model=self.ref_model, **self.train_args)
        self.history.append(stats)
        self._trained_since_publish = True
        return {**metrics, **stats.metrics()}

    def publish(self, version: int) -> None:
        """The trained weights into the replica between batches, served as `version` (a step that trained nothing:
        the same weights under this version)."""
        assert self.replica is not None, "publish() runs inside serving()"
        self.replica.update_weights(plain_weights(self.model) if self._trained_since_publish else None, version)
        self._trained_since_publish = False

    def save(self, step: int) -> str | None:
        if self.output_dir is None:
            return None
        return str(self._save(self.output_dir / f"step-{step}"))

    def _save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        model = copy.deepcopy(self.model).merge_and_unload() if self.lora is not None else self.model
        model.save_pretrained(str(folder))
        self.tokenizer.save_pretrained(str(folder))
        return folder

    def finish(self) -> dict[str, float]:
        """Saves the model to `output_dir` (when given and a pair trained it: a run with none writes no copy of its
        base); the run's pair count and last loss."""
        if self.output_dir is not None and self.model is not None and self.counts.pairs:
            self._save(self.output_dir)
        losses = [loss for stats in self.history for loss in stats.losses]
        return {"dpo/total_pairs": float(self.counts.pairs), "dpo/last_loss": losses[-1] if losses else math.nan}


def why_no_pair(samples: Sequence[Sample], counts: PairCounts, margin: float) -> str:
    """A step without a pair, said: the groups whose rewards were all equal (nothing to prefer), the calls whose
    replies were the same, and the agents whose calls saw different prompts in the two rollouts (their earlier turns
    differed), which a pair cannot compare."""
    rewards: dict[Any, set[float]] = {}
    for sample in samples:
        rewards.setdefault(sample.group, set()).add(sample.reward)
    tied = sum(1 for values in rewards.values() if max(values) - min(values) <= margin)
    said = f"no preference pair: {len(rewards)} groups, {tied} with every reward within {margin} of the others"
    if counts.identical_replies:
        said += f"; {counts.identical_replies} calls replied the same on both sides"
    if counts.differing_agents:
        agents = ", ".join(f"{agent} ({count})" for agent, count in sorted(counts.differing_agents.items()))
        said += (f"; the calls of {agents} saw different prompts in the two rollouts (their earlier turns "
                 "differed): a pair needs the same prompt")  # fmt: skip
    return said
