"""What a model brings to `lightning-otel train`: the settings this project measured for it with each backend (a
recipe), or, for a model no recipe names, the rules the field uses (the Tinker cookbook's LoRA learning rate for the
model's width, verl's full fine-tuning rate) and the sampling its own `generation_config.json` asks for.

    recipe_for("smollm2", "tinker")      # -> Recipe(learning_rate=6.5e-4, temperature=0.7, lora_rank=32, ...)
    generic_recipe("tinker", folder)     # a folder of ours we never measured: the cookbook's rule for its width

One recipe per model and backend, never per agent: the figures behind each are in docs/models.md ("Recipes").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ALGORITHMS = ("verl", "tinker", "sft", "dpo")


@dataclass(frozen=True, slots=True)
class Recipe:
    """The settings a run takes when no flag sets them. `lora_rank` None: the backend trains every weight;
    `warm_start_learning_rate`: the supervised warm start's (`--warm-start`); `why`: where the figures come from."""

    learning_rate: float
    temperature: float
    max_tokens: int
    steps: int
    tasks_per_step: int
    group_size: int
    lora_rank: int | None = None
    warm_start_learning_rate: float = 1e-4
    val_samples: int = 4  # sampled validation: each val task this many times at the training temperature
    max_minutes: float | None = None  # a time budget for the steps (a CPU's half hour); None: the steps decide
    why: str = ""


# (model name, algorithm) -> what this project measured it learns with (docs/models.md, "Recipes").
# fmt: off
RECIPES: dict[tuple[str, str], Recipe] = {
    # LoRA rank 32 at half the cookbook's rate for SmolLM2's width (576): FrozenLake as text, 3 seeds each, went
    # 0.008 -> 0.348 at 6.5e-4 against 0.008 -> 0.129 at 1.3e-3 (the cookbook's, which the calculator agent learned at,
    # +37 SE; one seed of 1.3e-3 rerun on today's code: 0.273); the Tinker cookbook's RL recipes run below its
    # supervised rule. 4 tasks x 8 rollouts (fewer tied groups than 4 a task at pass rates near 0 or 1); temperature
    # 0.7 as the demo measured it (at 1.0 the 4-bit model's replies are mostly noise), the learner's log-probs
    # tempered alike. A CPU's half hour: at most 18 minutes of steps (a tool agent's long prompts took 210 s a step,
    # a one-call agent's 20 s), one sampled validation a task
    ("smollm2", "tinker"): Recipe(6.5e-4, 0.7, 64, steps=16, tasks_per_step=4, group_size=8, lora_rank=32,
                                  val_samples=1, max_minutes=18,
                                  why="FrozenLake (3 seeds a rate), the calculator and the demo on SmolLM2"),
    # the demo on SmolLM2 (3 runs, 0.37 -> 0.52-0.62): full fine-tuning at 2e-5, temperature 0.7
    ("smollm2", "verl"): Recipe(2e-5, 0.7, 64, steps=20, tasks_per_step=4, group_size=4, val_samples=1,
                                max_minutes=18, why="the demo on SmolLM2"),
    # the calculator's online DPO arm (0.84 held-out over 3 seeds): LoRA rank 32 off the tied output layer, 2e-4
    ("smollm2", "dpo"): Recipe(2e-4, 0.7, 64, steps=16, tasks_per_step=4, group_size=8, lora_rank=32,
                               val_samples=1, max_minutes=18, why="the calculator agent's DPO arm on SmolLM2"),
    # rejection sampling from the policy's own rollouts, then fine-tuning: the warm starts' rate (calculator, SQL)
    ("smollm2", "sft"): Recipe(1e-4, 0.7, 64, steps=4, tasks_per_step=16, group_size=4, val_samples=1,
                               why="the calculator and SQL warm starts on SmolLM2"),
    # the tiny random model: what the tests use (a random model moves only at large rates; it learns nothing useful)
    ("tiny", "tinker"): Recipe(1e-2, 1.0, 16, steps=4, tasks_per_step=4, group_size=4, lora_rank=8, val_samples=2,
                               why="benchmarks/frozen_lake.py's rate for the tiny model"),
    ("tiny", "verl"): Recipe(2e-3, 1.0, 16, steps=4, tasks_per_step=4, group_size=4, val_samples=2,
                             why="the demo's rate for the tiny model"),
    ("tiny", "dpo"): Recipe(1e-3, 1.0, 16, steps=4, tasks_per_step=4, group_size=4, lora_rank=8, val_samples=2,
                            why="the DPO tests' rate for the tiny model"),
    ("tiny", "sft"): Recipe(1e-3, 1.0, 16, steps=2, tasks_per_step=4, group_size=2, val_samples=2,
                            why="a rate that moves the tiny model"),
}
# fmt: on

# Tinker cookbook (hyperparam_utils.get_lr): LR = 5e-5 x 10 (LoRA) x (2000 / hidden size) ^ P, P by family
COOKBOOK_BASE_LR, COOKBOOK_LORA_MULTIPLIER = 5e-5, 10.0
COOKBOOK_EXPONENT = {"qwen2": 0.0775, "qwen3": 0.0775, "llama": 0.781}
VERL_LEARNING_RATE = 1e-6  # verl's and Agent Lightning's full fine-tuning rate for RL on billion-parameter models


def recipe_for(model: str, algorithm: str) -> Recipe | None:
    """The measured recipe for a model by name (`smollm2`, `tiny`) and a backend; None when there is none."""
    return RECIPES.get((model, algorithm))


def cookbook_lora_learning_rate(config: dict[str, Any]) -> float:
    """The Tinker cookbook's LoRA learning rate for a model's config (`hidden_size`, `model_type`; Llama's
    exponent for a family it does not name)."""
    hidden = int(config.get("hidden_size") or 2000)
    exponent = COOKBOOK_EXPONENT.get(str(config.get("model_type", "")), COOKBOOK_EXPONENT["llama"])
    return COOKBOOK_BASE_LR * COOKBOOK_LORA_MULTIPLIER * (2000 / hidden) ** exponent


def generic_recipe(algorithm: str, folder: Path | None) -> Recipe:
    """For a model no recipe names: LoRA backends at the cookbook's rate for its width (a folder's config.json; 5e-4
    without one), verl at its own full fine-tuning rate; temperature 1, 128 reply tokens, 8 tasks x 4 a step."""
    config = model_config(folder)
    lora = cookbook_lora_learning_rate(config) if config else COOKBOOK_BASE_LR * COOKBOOK_LORA_MULTIPLIER
    base = Recipe(lora, 1.0, 128, steps=20, tasks_per_step=8, group_size=4, lora_rank=32,
                  why="no recipe for this model: the Tinker cookbook's LoRA rate for its width")  # fmt: skip
    if algorithm == "verl":
        return replace(base, learning_rate=VERL_LEARNING_RATE, lora_rank=None,
                       why="no recipe for this model: verl's full fine-tuning rate")  # fmt: skip
    if algorithm == "dpo":
        return replace(base, learning_rate=lora / 5, why="no recipe for this model: a fifth of the cookbook's rate")
    if algorithm == "sft":
        return replace(base, learning_rate=lora / 10, lora_rank=None, steps=4, tasks_per_step=16,
                       why="no recipe for this model: a tenth of the cookbook's LoRA rate, every weight")  # fmt: skip
    return base


def model_config(folder: Path | None) -> dict[str, Any]:
    """A model folder's config.json ({} when there is none to read)."""
    return _json(folder / "config.json") if folder is not None else {}


def generation_defaults(folder: Path | None) -> dict[str, float]:
    """The sampling a model folder's own `generation_config.json` asks for (`temperature`, `top_p`), when it does
    (`do_sample` false: greedy is its default, which trains nothing; left out)."""
    config = _json(folder / "generation_config.json") if folder is not None else {}
    if not config or config.get("do_sample") is False:
        return {}
    return {key: float(config[key]) for key in ("temperature", "top_p") if isinstance(config.get(key), (int, float))}


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


__all__ = ["ALGORITHMS", "RECIPES", "Recipe", "generation_defaults", "generic_recipe", "recipe_for"]
