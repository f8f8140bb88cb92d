"""A training run's settings, resolved before anything starts: each value with where it came from.

    plan = resolve_plan(asked, model="smollm2", folder=folder, train_tasks=64, val_tasks=16, gpu=False)
    for line in plan.lines():            # printed before the run (and kept in its folder as settings.json)
        print(line)

A value comes from, in this order: the user's flag; the recipe this project measured for the model and backend
(`recipes.RECIPES`); the model folder's own `generation_config.json` (sampling only); the field's rule for a model
no recipe names (`recipes.generic_recipe`). The backend, when not asked for, is verl with a GPU and, without one,
the one that learned most per minute on this project's 2-core machines (`CPU_DEFAULT`, docs/models.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lightning_otel.runs.recipes import ALGORITHMS, Recipe, generation_defaults, generic_recipe, recipe_for

# Without a GPU: LoRA on the local engine (docs/models.md, "Which backend on a CPU": per minute on 2 cores it learned
# where full fine-tuning with verl's CPU workers had not yet moved)
CPU_DEFAULT = "tinker"
LORA_BACKENDS = ("tinker", "dpo")


@dataclass(frozen=True, slots=True)
class Asked:
    """What the user set (None: not set)."""

    algorithm: str | None = None
    steps: int | None = None
    epochs: int | None = None
    tasks_per_step: int | None = None
    group_size: int | None = None
    learning_rate: float | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    lora_rank: int | None = None
    val_samples: int | None = None
    max_minutes: float | None = None

    def __post_init__(self) -> None:
        for name in ("steps", "epochs", "tasks_per_step", "group_size", "max_tokens", "lora_rank"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        if self.steps is not None and self.epochs is not None:
            raise ValueError("give --steps or --epochs, not both")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ValueError(f"--learning-rate must be > 0, got {self.learning_rate}")
        if self.temperature is not None and not self.temperature > 0:
            raise ValueError(f"--temperature must be > 0 (training samples; validation is also greedy), got "
                             f"{self.temperature}")  # fmt: skip
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"--max-minutes must be > 0, got {self.max_minutes}")
        if self.val_samples is not None and self.val_samples < 0:
            raise ValueError(f"--val-samples must be >= 0, got {self.val_samples}")
        if self.algorithm is not None and self.algorithm not in ALGORITHMS:
            raise ValueError(f"--algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}")


@dataclass(frozen=True, slots=True)
class Plan:
    """The resolved settings; `sources[name]`: where each came from."""

    algorithm: str
    model: str  # as named (`smollm2`, `tiny`, a folder)
    steps: int
    tasks_per_step: int
    group_size: int
    learning_rate: float
    temperature: float
    top_p: float
    max_tokens: int
    lora_rank: int | None
    val_samples: int
    max_minutes: float | None  # a time budget for the steps (None: the steps decide)
    train_tasks: int
    val_tasks: int
    warm_start_learning_rate: float  # used only with a warm start (--warm-start, --warm-start-teacher)
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def epochs(self) -> float:
        return self.steps * self.tasks_per_step / self.train_tasks

    @property
    def rollouts(self) -> int:
        return self.steps * self.tasks_per_step * self.group_size

    def lines(self) -> list[str]:
        """The settings as a few lines: value, then where it came from."""
        lora = f"LoRA rank {self.lora_rank}" if self.lora_rank else "every weight (full fine-tuning)"
        rows = [
            ("backend", self.algorithm, "algorithm"),
            ("steps", f"{self.steps} x {self.tasks_per_step} tasks x {self.group_size} rollouts = {self.rollouts} "
                      f"rollouts ({self.epochs:.1f} epochs of {self.train_tasks} tasks)", "steps"),
            ("time budget", f"at most {self.max_minutes:g} minutes of steps (the step that would overrun it is the "
                            "last)" if self.max_minutes else "none: every step runs", "max_minutes"),
            ("learning rate", f"{self.learning_rate:.3g}", "learning_rate"),
            ("trains", lora, "lora_rank"),
            ("sampling", f"temperature {self.temperature:g}, top_p {self.top_p:g}, at most {self.max_tokens} reply "
                         "tokens a call (fewer when the agent asks for fewer)", "temperature"),
            ("validation", self._validation(), "val_samples"),
        ]  # fmt: skip
        width = max(len(name) for name, _, _ in rows)
        return [f"  {name:<{width}}  {value}  [{self.sources.get(key, 'default')}]" for name, value, key in rows]

    def _validation(self) -> str:
        if not self.val_tasks:
            return "none (no --val: no verdict on held-out tasks)"
        sampled = ""
        if self.val_samples:
            each = "one sample" if self.val_samples == 1 else f"{self.val_samples} samples"
            sampled = f", and {each} each at temperature {self.temperature:g}"
        return f"{self.val_tasks} tasks before the first step and after the last: greedy{sampled}"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def resolve_plan(asked: Asked, *, model: str, folder: Path | None, train_tasks: int, val_tasks: int, gpu: bool) -> Plan:
    """The run's settings from the user's flags, the model's recipe, its folder and the tasks (module docstring)."""
    sources: dict[str, str] = {}
    algorithm = asked.algorithm
    if algorithm is not None:
        sources["algorithm"] = "--algorithm"
    else:
        algorithm = "verl" if gpu else CPU_DEFAULT
        sources["algorithm"] = "default with a GPU" if gpu else "default without a GPU (docs/models.md)"
    recipe = recipe_for(model, algorithm)
    origin = f"recipe {model}/{algorithm}"
    if recipe is None:
        recipe, origin = generic_recipe(algorithm, folder), "no recipe for this model: the field's rule"
    sampling = generation_defaults(folder) if recipe_for(model, algorithm) is None else {}

    def pick(name: str, flag: str, recipe_value: Any, folder_value: Any = None) -> Any:
        value = getattr(asked, name)
        if value is not None:
            sources[name] = flag
            return value
        if folder_value is not None:
            sources[name] = "the model's generation_config.json"
            return folder_value
        sources[name] = origin
        return recipe_value

    tasks_per_step = min(pick("tasks_per_step", "--tasks-per-step", recipe.tasks_per_step), train_tasks)
    if asked.epochs is not None:
        steps = -(-asked.epochs * train_tasks // tasks_per_step)
        sources["steps"] = "--epochs"
    else:
        steps = pick("steps", "--steps", recipe.steps)
    lora_rank = pick("lora_rank", "--lora-rank", recipe.lora_rank)
    if algorithm not in LORA_BACKENDS and asked.lora_rank is not None:
        raise ValueError(f"--lora-rank: the {algorithm} backend here trains every weight; LoRA is the tinker and dpo "
                         "backends' (verl's own LoRA: actor_rollout_ref.model.lora_rank=R as a verl key, not tested "
                         "here)")  # fmt: skip
    group_size = pick("group_size", "--group-size", recipe.group_size)
    if group_size < 2 and algorithm != "sft":
        raise ValueError(f"--group-size {group_size}: {algorithm} compares a task's rollouts with each other (GRPO's "
                         "groups, DPO's pairs): it needs at least 2")  # fmt: skip
    val_samples = pick("val_samples", "--val-samples", recipe.val_samples)
    return Plan(
        algorithm=algorithm,
        model=model,
        steps=steps,
        tasks_per_step=tasks_per_step,
        group_size=group_size,
        learning_rate=pick("learning_rate", "--learning-rate", recipe.learning_rate),
        temperature=pick("temperature", "--temperature", recipe.temperature, sampling.get("temperature")),
        top_p=sampling.get("top_p", 1.0),
        max_tokens=pick("max_tokens", "--max-tokens", recipe.max_tokens),
        lora_rank=lora_rank if algorithm in LORA_BACKENDS else None,
        val_samples=val_samples if val_tasks else 0,
        max_minutes=pick("max_minutes", "--max-minutes", recipe.max_minutes),
        train_tasks=train_tasks,
        val_tasks=val_tasks,
        warm_start_learning_rate=recipe.warm_start_learning_rate,
        sources=sources,
    )


__all__ = ["CPU_DEFAULT", "Asked", "Plan", "Recipe", "resolve_plan"]
