"""Keywords the facades took before `TrainingOptions` held them: user code written for them keeps working for a
minor version with a DeprecationWarning that names the new spelling, or fails with an error that names it."""

from __future__ import annotations

import pytest

import lightning_otel as agl


def on_step(step: int, metrics: dict[str, float]) -> None:
    del step, metrics


def test_verl_on_step_still_works_and_the_warning_names_training_options() -> None:
    with pytest.warns(DeprecationWarning, match=r"VERL\(on_step=\.\.\.\) moved .*TrainingOptions\(on_step=\.\.\.\)"):
        verl = agl.VERL({"trainer": {"total_epochs": 1}}, on_step=on_step, max_staleness=1)
    assert verl.options.on_step is on_step
    assert verl.options.max_staleness == 1


def test_a_keyword_that_moved_elsewhere_names_where() -> None:
    with pytest.raises(
        TypeError,
        match=r"VERL\(rollout_timeout_s=\.\.\.\) moved: pass Trainer\(settings=RunSettings\(rollout_timeout_s=",
    ):
        agl.VERL(None, rollout_timeout_s=30.0)
    with pytest.raises(TypeError, match=r"Sampling\(temperature=\.\.\.\)"):
        agl.DPO("model", temperature=0.7)


def test_an_unknown_keyword_and_a_field_set_twice_are_errors() -> None:
    with pytest.raises(TypeError, match="VERL\\(\\) got an unexpected keyword argument 'on_stpe'"):
        agl.VERL(None, on_stpe=on_step)
    with pytest.raises(TypeError, match=r"options\.on_step both set"):
        agl.VERL(None, agl.TrainingOptions(on_step=on_step), on_step=on_step)


def test_dpo_takes_its_old_group_by_agent_with_the_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"DPO\(group_by_agent=\.\.\.\)"):
        dpo = agl.DPO("model", group_by_agent=True)
    assert dpo.options.group_by_agent
