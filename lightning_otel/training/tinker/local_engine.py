"""The local engine: LoRA training of a Hugging Face causal LM with torch + transformers + peft, on this machine's
device (CUDA when torch sees one, else CPU), with Tinker's semantics.

- `forward_backward(data, loss_fn)` computes every target token's log-probability under the current weights (a
  micro-batch's rows that begin alike, a group's rollouts of one prompt, have that beginning computed once),
  applies the loss (`losses.py`), sums it and adds the gradients to those already accumulated; with
  `loss_fn_config["temperature"]` (our extension: the sampler's temperature) the log-probabilities are those of the
  logits divided by it, as the sampler's were, so the importance ratio of an on-policy token is 1 at any temperature;
- `optim_step(AdamParams)` takes one AdamW step with the given settings (they may change per step), clips when
  `grad_clip_norm > 0`, and clears the gradients;
- `save_weights_and_get_sampler(name)` snapshots the adapter into a sampler (a frozen copy of the LoRA weights over
  the shared, never-trained base weights, so sampling never sees half-updated weights) with the next version number
  (in memory: nothing is written);
- `save_state` / `load_state`: the adapter (a PEFT folder any `PeftModel.from_pretrained` loads) and the optimizer,
  under `log_dir/checkpoints/name`, to resume or to serve;
- `policy_engine(name)`: another LoRA adapter over the same base model, loaded once (a policy per agent): its own
  weights, optimizer, sampler versions and states (`log_dir/checkpoints/<name>/<policy>`).

LoRA on the attention and MLP projections and, with `train_unembed`, the output layer (as Tinker's
`create_lora_training_client`). B starts at zero: version 0 samples exactly the base model.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_otel.serving.sampler_api import Generation, HFChatTokenizer
from lightning_otel.training.tinker.engine import checked_datums
from lightning_otel.training.tinker.saved_state import STATE_FILE, begin_state, end_state, state_complete
from lightning_otel.training.tinker.token_scoring import (
    score_sequences,
    shared_prefix_batches,
    shared_prefix_logprobs,
)
from lightning_otel.training.tinker.types import (
    LOSS_INPUTS,
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    OptimStepOutput,
    SampledSequence,
    SamplingParams,
)

if TYPE_CHECKING:  # torch, transformers and peft are imported when an engine is built: the package face stays light
    import torch

log = logging.getLogger("lightning_otel.tinker")

ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
UNEMBED_MODULES = ("lm_head",)


class LocalSampler:
    """A frozen snapshot of the policy that samples a request's `num_samples` together (`CPUReplica.generate_many`:
    one batch with a KV cache, logprobs of the sampled tokens at the request's temperature)."""

    def __init__(self, model: torch.nn.Module, tokenizer: HFChatTokenizer, version: int, seed: int = 0) -> None:
        from lightning_otel.serving.cpu_replica import CPUReplica

        self.version = version
        self._replica = CPUReplica(model, tokenizer, seed=seed + version)

    def sample(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> list[SampledSequence]:
        if params.seed is not None:
            self._replica.reseed(params.seed)
        generations = self._replica.generate_many(
            [prompt] * num_samples, max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p
        )
        return _sequences(generations)

    async def sample_async(self, prompt: Sequence[int], num_samples: int,
                           params: SamplingParams) -> list[SampledSequence]:  # fmt: skip
        """`sample` from an event loop, without a thread: the group is queued together, as `sample` queues it."""
        if params.seed is not None:
            self._replica.reseed(params.seed)
        generations = await self._replica.agenerate_many(
            [prompt] * num_samples, max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p
        )
        return _sequences(generations)

    def compute_logprobs(self, tokens: Sequence[int], temperature: float = 1.0) -> list[float | None]:
        """Tinker's `SamplingClient.compute_logprobs`: each token's logprob given those before it (the first: None),
        at `temperature` as the sampler's logprobs are (0 is scored at 1: greedy has no distribution)."""
        return self.compute_logprobs_many([tokens], temperature)[0]

    def compute_logprobs_many(
        self, sequences: Sequence[Sequence[int]], temperature: float = 1.0
    ) -> list[list[float | None]]:
        """`compute_logprobs` of many sequences, batched: those sharing a beginning (a group's prompt) read it once."""
        return score_sequences(self._replica.model, sequences, temperature)


def _sequences(generations: Sequence[Generation]) -> list[SampledSequence]:
    return [SampledSequence(g.token_ids, g.logprobs, g.finish_reason) for g in generations]


class LocalEngine:
    """See the module docstring. `model_path`: a Hugging Face model folder (its tokenizer must have a chat
    template); `log_dir`: where sampler weights and states are saved (none: nothing written)."""

    tempered_logprobs = True  # forward_backward takes the sampling temperature (loss_fn_config["temperature"])

    def __init__(
        self,
        model_path: str | Path,
        *,
        rank: int = 32,
        alpha: float | None = None,
        seed: int = 0,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        device: str | None = None,
        micro_batch_size: int = 8,
        log_dir: str | Path | None = None,
        min_shared_prefix: int = 16,
    ) -> None:
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        targets = (
            (ATTENTION_MODULES if train_attn else ()) + (MLP_MODULES if train_mlp else ())
            + (UNEMBED_MODULES if train_unembed else ())
        )  # fmt: skip
        if not targets:
            raise ValueError("nothing to train: train_attn, train_mlp and train_unembed are all False")
        self.base_model = str(model_path)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.micro_batch_size = micro_batch_size
        self.min_shared_prefix = min_shared_prefix  # a micro-batch's rows sharing this many tokens read them once
        self.seed = seed
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.chat_tokenizer = HFChatTokenizer(AutoTokenizer.from_pretrained(self.base_model))
        dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        base = AutoModelForCausalLM.from_pretrained(self.base_model, dtype=dtype).to(self.device)
        present = {name.rsplit(".", 1)[-1] for name, _ in base.named_modules()}
        modules = [name for name in targets if name in present]
        if not modules:
            raise ValueError(f"none of {targets} is a module of {self.base_model}: LoRA has nothing to adapt")
        torch.manual_seed(seed)
        config = LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else rank, target_modules=modules,
                            lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")  # fmt: skip
        with warnings.catch_warnings():  # peft warns about merging a tied lm_head: the engine never merges
            warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
            self.model = get_peft_model(base, config)
        self._lora = config
        self.adapter_name = "default"  # PEFT's name for the first adapter; a policy engine's is its policy's
        self._policies: dict[str, LocalEngine] = {}  # policy name -> its engine, shared by every engine of the base
        self.trainable = self._adapter_parameters()
        self._optimizer: torch.optim.AdamW | None = None
        self.version = -1  # the last sampler's; the first save makes version 0 (the base model: B = 0)
        self.steps = 0

    def policy_engine(self, name: str) -> LocalEngine:
        """The engine of policy `name`: another LoRA adapter over this engine's base model (one copy of the base in
        memory), with the same rank and targets, B = 0 (it starts as the base model), its own optimizer, sampler
        versions and states. Asked twice, the same engine."""
        import torch

        if name in self._policies:
            return self._policies[name]
        if name == "default":
            raise ValueError("'default' is PEFT's name for the engine's own adapter: name the policy otherwise")
        torch.manual_seed(self.seed)  # every policy starts from the same A (and B = 0): a like-for-like comparison
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
            self.model.add_adapter(name, copy.deepcopy(self._lora))
        engine = copy.copy(self)  # shares the model, tokenizer and device; the adapter's state is its own
        engine.adapter_name = name
        engine.trainable = engine._adapter_parameters()
        engine._optimizer, engine.version, engine.steps = None, -1, 0
        self._policies[name] = engine
        return engine

    def _adapter_parameters(self) -> list[torch.nn.Parameter]:
        marker = f".{self.adapter_name}."  # PEFT names them ...lora_A.<adapter>.weight
        return [p for name, p in self.model.named_parameters() if "lora_" in name and marker in name]

    def _use_adapter(self) -> None:
        if self.model.active_adapter != self.adapter_name:
            self.model.set_adapter(self.adapter_name)

    # --- training ----------------------------------------------------------------------------------------------
    def forward_backward(
        self, data: Sequence[Any], loss_fn: str, loss_fn_config: Mapping[str, float] | None = None
    ) -> ForwardBackwardOutput:
        from lightning_otel.training.tinker.losses import loss_function

        datums = checked_datums(data, loss_fn)
        loss = loss_function(loss_fn)
        config = dict(loss_fn_config or {})
        temperature = float(config.pop("temperature", 1.0))  # the sampler's: its log-probs and ours alike
        self._use_adapter()
        self.model.train()
        outputs: list[dict[str, list[float]]] = [{} for _ in datums]
        total = 0.0
        tokens = computed = 0
        for indices, shared in shared_prefix_batches(
            [datum.model_input for datum in datums], self.micro_batch_size, self.min_shared_prefix
        ):
            chunk = [datums[index] for index in indices]
            logp, inputs, mask = self._target_logprobs(chunk, LOSS_INPUTS[loss_fn], temperature, shared=shared)
            chunk_loss = (loss(logp, inputs, config) * mask).sum()
            chunk_loss.backward()
            total += float(chunk_loss.detach())
            tokens += int(mask.sum())
            computed += shared + sum(len(datum.model_input) - shared for datum in chunk)
            for row, (index, datum) in enumerate(zip(indices, chunk, strict=True)):
                outputs[index] = {"logprobs": logp[row, : len(datum.model_input)].detach().float().cpu().tolist()}
        metrics = {"loss:sum": total, "tokens:sum": float(tokens), "computed_tokens:sum": float(computed)}
        return ForwardBackwardOutput(outputs, metrics)

    def _target_logprobs(
        self, chunk: Sequence[Datum], keys: Sequence[str], temperature: float = 1.0, *, shared: int = 0
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """Right-padded batch -> each target's log-probability [B, T] (of logits / `temperature`, as the sampler drew
        them), the loss inputs [B, T], the real-token mask. `shared` > 0: the rows' first `shared` input tokens are
        the same, and are read once (`token_scoring.shared_prefix_logprobs`)."""
        import torch

        width = max(len(datum.model_input) for datum in chunk)

        def padded(rows: list[list[Any]], dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor([row + [0] * (width - len(row)) for row in rows], dtype=dtype, device=self.device)

        input_ids = padded([datum.model_input for datum in chunk], torch.long)
        mask = padded([[1] * len(datum.model_input) for datum in chunk], torch.long)
        targets = padded([list(datum.loss_fn_inputs["target_tokens"]) for datum in chunk], torch.long)
        inputs = {
            key: padded([list(datum.loss_fn_inputs[key]) for datum in chunk], torch.float32)
            for key in keys
            if key != "target_tokens"
        }
        if shared:
            logp = shared_prefix_logprobs(self.model, input_ids, mask, targets, temperature, shared)
            return logp, inputs, mask.float()
        logits = self.model(input_ids=input_ids, attention_mask=mask).logits.float() / temperature
        logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return logp, inputs, mask.float()

    def optim_step(self, params: AdamParams) -> OptimStepOutput:
        import torch

        if self._optimizer is None:
            self._optimizer = torch.optim.AdamW(self.trainable, lr=params.learning_rate)
        for group in self._optimizer.param_groups:  # Tinker takes the settings per step
            group.update(lr=params.learning_rate, betas=(params.beta1, params.beta2), eps=params.eps,
                         weight_decay=params.weight_decay)  # fmt: skip
        limit = params.grad_clip_norm if params.grad_clip_norm > 0 else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.trainable, limit))
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return OptimStepOutput({"grad_norm": grad_norm, "learning_rate": params.learning_rate})

    # --- sampling ----------------------------------------------------------------------------------------------
    def save_weights_and_get_sampler(self, name: str) -> LocalSampler:
        self.version += 1
        # the base weights are never trained: the snapshot shares them and copies only the LoRA weights
        shared = {id(p): p for parameter_name, p in self.model.named_parameters() if "lora_" not in parameter_name}
        snapshot = copy.deepcopy(self.model, memo=shared)
        snapshot.set_adapter(self.adapter_name)
        snapshot.eval()
        for parameter in snapshot.parameters():
            parameter.requires_grad_(False)
        return LocalSampler(snapshot, self.chat_tokenizer, self.version, seed=self.seed)

    # --- state -------------------------------------------------------------------------------------------------
    def save_state(self, name: str) -> str:
        """Adapter + optimizer under `log_dir/checkpoints/name` (a policy engine's: `.../name/<policy>`; a path
        `load_state` takes)."""
        import torch

        if self.log_dir is None:
            raise ValueError("save_state needs the engine's log_dir")
        folder = self.log_dir / "checkpoints" / name
        # PEFT writes an adapter other than "default" in a folder of its name
        path = folder if self.adapter_name == "default" else folder / self.adapter_name
        if path.is_dir():
            begin_state(path)  # a state saved again (a resumed run's step) is not whole until its last file
        # the base weights never change
        self.model.save_pretrained(str(folder), save_embedding_layers=False, selected_adapters=[self.adapter_name])
        if self._optimizer is not None:
            torch.save(self._optimizer.state_dict(), path / "optimizer.pt")
        end_state(path, {"steps": self.steps, "version": self.version})
        return str(path)

    def load_state(self, path: str) -> None:
        import torch
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        folder = Path(path)
        if not state_complete(folder):
            raise ValueError(f"{folder} is not a whole saved state (no {STATE_FILE}: its save did not end)")
        set_peft_model_state_dict(self.model, load_file(str(folder / "adapter_model.safetensors")),
                                  adapter_name=self.adapter_name)  # fmt: skip
        if (folder / "optimizer.pt").exists():
            self._optimizer = torch.optim.AdamW(self.trainable)
            self._optimizer.load_state_dict(torch.load(folder / "optimizer.pt", map_location=self.device))
        state = json.loads((folder / STATE_FILE).read_text())
        self.steps, self.version = int(state["steps"]), int(state["version"])
