"""A run's settings: the user's flags win, then the model's recipe, then the model folder's own sampling, then the
field's rule for a model no recipe names; each value says where it came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_otel.runs.plan import CPU_DEFAULT, Asked, Plan, resolve_plan
from lightning_otel.runs.recipes import RECIPES, cookbook_lora_learning_rate, generic_recipe


def plan(asked: Asked | None = None, model: str = "smollm2", folder: Path | None = None, **counts: int) -> Plan:
    return resolve_plan(asked or Asked(), model=model, folder=folder, train_tasks=counts.get("train", 64),
                        val_tasks=counts.get("val", 16), gpu=counts.get("gpu", 0) == 1)  # fmt: skip


def test_a_named_model_brings_its_recipe_and_says_so() -> None:
    resolved = plan()
    recipe = RECIPES[("smollm2", CPU_DEFAULT)]
    assert (resolved.algorithm, resolved.learning_rate, resolved.temperature, resolved.lora_rank) == (
        CPU_DEFAULT, recipe.learning_rate, recipe.temperature, recipe.lora_rank)  # fmt: skip
    assert resolved.sources["learning_rate"] == f"recipe smollm2/{CPU_DEFAULT}"
    assert resolved.sources["algorithm"].startswith("default without a GPU")
    assert plan(gpu=1).algorithm == "verl"
    assert any("[recipe smollm2/" in line for line in resolved.lines())


def test_the_users_flags_win_and_are_named() -> None:
    resolved = plan(Asked(algorithm="verl", learning_rate=3e-5, temperature=0.9, epochs=2, tasks_per_step=8))
    assert (resolved.learning_rate, resolved.temperature, resolved.steps) == (3e-5, 0.9, 16)  # 2 x 64 / 8
    assert resolved.sources["learning_rate"] == "--learning-rate" and resolved.sources["steps"] == "--epochs"
    assert resolved.lora_rank is None  # verl trains every weight


def test_a_folder_without_recipe_takes_its_generation_config_and_the_cookbook_rule(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 896, "model_type": "qwen2"}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"do_sample": True, "temperature": 0.6, "top_p": 0.8}))
    resolved = plan(model=str(tmp_path), folder=tmp_path)
    assert (resolved.temperature, resolved.top_p) == (0.6, 0.8)
    assert resolved.sources["temperature"] == "the model's generation_config.json"
    assert resolved.learning_rate == pytest.approx(cookbook_lora_learning_rate({"hidden_size": 896,
                                                                                "model_type": "qwen2"}))  # fmt: skip
    assert generic_recipe("verl", tmp_path).learning_rate == 1e-6


def test_smollm2s_width_gives_the_cookbooks_rate_this_project_measured() -> None:
    assert cookbook_lora_learning_rate({"hidden_size": 576, "model_type": "llama"}) == pytest.approx(1.32e-3, rel=0.01)


def test_a_step_takes_at_most_the_tasks_there_are() -> None:
    assert plan(train=3).tasks_per_step == 3


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        (lambda: Asked(steps=0), "--steps must be >= 1"),
        (lambda: Asked(steps=2, epochs=1), "--steps or --epochs"),
        (lambda: Asked(learning_rate=0.0), "--learning-rate must be > 0"),
        (lambda: Asked(temperature=0.0), "--temperature must be > 0"),
        (lambda: Asked(algorithm="ppo"), "--algorithm must be one of"),
    ],
)
def test_bad_settings_are_refused_naming_the_flag(asked: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan(asked() if callable(asked) else asked)


def test_group_size_one_and_lora_on_verl_are_refused() -> None:
    with pytest.raises(ValueError, match="--group-size 1: tinker compares"):
        plan(Asked(group_size=1))
    with pytest.raises(ValueError, match="--lora-rank: the verl backend here trains every weight"):
        plan(Asked(algorithm="verl", lora_rank=8))
