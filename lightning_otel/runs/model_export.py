"""The trained policy as a plain Hugging Face folder: what a run leaves in `model/`, and what `lightning-otel
export-model` makes from any checkpoint.

    export_model("runs/capitals-20261204-153012/checkpoints/step-16", "capitals-model")   # a LoRA adapter
    export_model("runs/demo/checkpoints/global_step_20", "demo-model")                   # a verl checkpoint
    export_model("runs/capitals-20261204-153012", "capitals-model")                      # a run: its latest

What it writes: the full weights in the dtype they were trained in, with the tokenizer and its chat template, so
`AutoModelForCausalLM.from_pretrained(folder)` loads it and vLLM serves it. From a LoRA adapter, the merged model,
and the adapter itself in `adapter/` (its `adapter_config.json` names its base model), for serving it as an
adapter. A model whose output layer is tied to its embeddings (SmolLM2's) and whose adapter trained that layer is
untied in the merged folder: merged into a tied weight, the adapter would move the embeddings too, and the folder
would not be the model that was trained. `export.json` says what it was made from.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from lightning_otel.training.tinker.saved_state import state_complete

ADAPTER_CONFIG = "adapter_config.json"
EXPORT_INFO = "export.json"
# verl writes it after a save ends, naming its step: the verl room's CHECKPOINT_MARKER, not imported (that module needs
# omegaconf, which an install without verl lacks)
VERL_MARKER = "latest_checkpointed_iteration.txt"


class NotACheckpoint(ValueError):
    """The source is none of the things a model can be exported from; the message says what it looked for."""


def export_model(
    source: str | Path, out: str | Path, *, about: dict[str, Any] | None = None, base: str | Path | None = None
) -> Path:
    """A Hugging Face folder at `out` from `source` (module docstring); `about` is added to `export.json`; `base`: a
    LoRA adapter's base model (default: the one its config names)."""
    source, out = Path(source), Path(out)
    if not source.exists():
        raise NotACheckpoint(f"{source} does not exist")
    if (source / ADAPTER_CONFIG).is_file():
        made_from = export_adapter(source, out, base=base)
    elif (source / "actor").is_dir():
        made_from = export_verl_checkpoint(source, out)
    elif (source / "config.json").is_file():
        _replace(out)
        shutil.copytree(source, out)
        made_from = {"kind": "model folder", "source": str(source.resolve())}
    elif (latest := latest_checkpoint(source)) is not None:
        return export_model(latest, out, about=about, base=base)
    else:
        raise NotACheckpoint(f"{source} is not a LoRA adapter (no {ADAPTER_CONFIG}), a verl checkpoint (no actor/), a "
                             "model folder (no config.json) or a run folder with checkpoints")  # fmt: skip
    (out / EXPORT_INFO).write_text(json.dumps({**made_from, **(about or {})}, indent=1) + "\n", encoding="utf-8")
    return out


def latest_checkpoint(folder: Path, policies: tuple[str, ...] = ()) -> Path | None:
    """A run folder's (or a checkpoints folder's) latest whole checkpoint: `step-N` (Tinker; with `policies`, one
    holding each one's state) or `global_step_N` (verl); a save its trainer was killed in is passed over."""
    root = folder / "checkpoints" if (folder / "checkpoints").is_dir() else folder
    found = [(int(path.name.rsplit("-", 1)[-1].rsplit("_", 1)[-1]), path) for path in root.glob("*step*")
             if path.is_dir() and path.name.rsplit("-", 1)[-1].rsplit("_", 1)[-1].isdigit()]  # fmt: skip
    whole = [(step, path) for step, path in found if step_complete(path, policies)]
    return max(whole)[1] if whole else None


def step_complete(step_folder: Path, policies: tuple[str, ...] = ()) -> bool:
    """A checkpoint folder that resuming or exporting can read: a verl `global_step_N` at or below verl's marker; a
    local engine's `step-N` whose state is whole (each of `policies`' in its subfolder, when given; else every
    adapter's in it)."""
    if step_folder.name.startswith("global_step_"):
        marker = step_folder.parent / VERL_MARKER
        if not marker.is_file():
            return True  # an older verl, or a folder copied without it: nothing to compare against
        try:
            return int(step_folder.name.rsplit("_", 1)[1]) <= int(marker.read_text().strip())
        except ValueError:
            return True
    if policies:
        return all(state_complete(step_folder / policy) for policy in policies)
    # every adapter in it (the step's own, or each policy's in its subfolder) with its state beside it
    adapters = [config.parent for config in step_folder.rglob("adapter_config.json")]
    return state_complete(step_folder) or (bool(adapters) and all(state_complete(folder) for folder in adapters))


def export_adapter(adapter: Path, out: Path, *, base: str | Path | None = None) -> dict[str, Any]:
    """A PEFT LoRA adapter merged into its base (`base`, else the one its config names) and saved at `out`, with the
    adapter beside it in `out/adapter`."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((adapter / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    base = Path(base or config.get("base_model_name_or_path") or "")
    if not (base / "config.json").is_file():
        raise NotACheckpoint(f"the adapter's base model {str(base)!r} is not a model folder here: give it (--base)")
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)  # LoRA trains in float32 here
    targets = config.get("target_modules") or []
    untied = "lm_head" in targets and _tied(model)
    if untied:  # the adapter's output layer is its own: the embeddings stay the base's
        model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
        model.config.tie_word_embeddings = False
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    _replace(out)
    merged.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(out))
    shutil.copytree(adapter, out / "adapter", ignore=shutil.ignore_patterns("optimizer.pt", "engine_state.json"))
    adapter_config = {**config, "base_model_name_or_path": str(base.resolve())}
    (out / "adapter" / ADAPTER_CONFIG).write_text(json.dumps(adapter_config, indent=1), encoding="utf-8")
    return {"kind": "LoRA adapter, merged", "source": str(adapter.resolve()), "base_model": str(base.resolve()),
            "lora_rank": config.get("r"), "untied_output_layer": untied}  # fmt: skip


def export_verl_checkpoint(checkpoint: Path, out: Path) -> dict[str, Any]:
    """verl's `global_step_N`: its `actor/huggingface` folder when the checkpoint saved the full weights there
    (`checkpoint.save_contents` with `hf_model`, what `lightning-otel train` sets), else verl's own model merger
    over the actor's shards (which writes bfloat16)."""
    hf = checkpoint / "actor" / "huggingface"
    _replace(out)
    if any(hf.glob("*.safetensors")):
        shutil.copytree(hf, out)
        how = "verl checkpoint (its hf_model)"
        _config_dtype_of_its_weights(out)
    else:
        # verl's own command (its public face), in a process of its own: it loads every shard
        command = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
                   "--local_dir", str(checkpoint / "actor"), "--target_dir", str(out)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise NotACheckpoint(f"verl's model merger failed on {checkpoint}: {done.stderr.strip()[-500:]}")
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
            if (hf / name).is_file() and not (out / name).exists():
                shutil.copy2(hf / name, out / name)
        how = "verl checkpoint (merged from the actor's shards by verl's model merger: bfloat16)"
    return {"kind": how, "source": str(checkpoint.resolve())}


def _config_dtype_of_its_weights(folder: Path) -> None:
    """verl writes its actor's weights (float32 on CPU) under a config that names the dtype it built the model in
    (bfloat16), and transformers loads a folder in its config's dtype: the config is made to say the weights' own."""
    from safetensors import safe_open

    first = next(iter(sorted(folder.glob("*.safetensors"))))
    with safe_open(str(first), "pt") as weights:
        dtype = str(weights.get_slice(next(iter(weights.keys()))).get_dtype()).lower()
    names = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}
    config_file = folder / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["dtype"] = names.get(dtype, dtype)
    if "torch_dtype" in config:  # the older transformers' spelling, when the config has it
        config["torch_dtype"] = config["dtype"]
    config_file.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def _tied(model: Any) -> bool:
    output = model.get_output_embeddings()
    return output is not None and output.weight is model.get_input_embeddings().weight


def _replace(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)


__all__ = ["NotACheckpoint", "export_adapter", "export_model", "export_verl_checkpoint", "latest_checkpoint"]
