"""Settings as values: the loop's options are one frozen, validated `TrainingOptions` that `TrainingLoop` and every
backend's facade take whole; a facade keeps only its engine's own arguments (at most 10 besides the options), the
loop at most 4; an option is checked once, when the options are made; a run's settings are fixed before it starts."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import lightning_otel as agl


def own_parameters(callable_: object) -> list[str]:
    """Besides the options and `**moved` (the keywords from before the options, deprecated: test_moved_arguments)."""
    return [name for name in inspect.signature(callable_).parameters if name not in ("self", "options", "moved")]


@pytest.mark.parametrize("facade", [agl.Tinker, agl.VERL, agl.DPO, agl.SFT])
def test_each_facade_takes_the_options_whole_and_at_most_ten_of_its_own(facade: type) -> None:
    assert "options" in inspect.signature(facade).parameters
    own = own_parameters(facade)
    assert len(own) <= 10, own
    loop_fields = {field.name for field in dataclasses.fields(agl.TrainingOptions)}
    assert not loop_fields & set(own), f"{facade.__name__} repeats the loop's options: {loop_fields & set(own)}"


def test_the_loop_takes_at_most_four() -> None:
    assert len(inspect.signature(agl.TrainingLoop).parameters) <= 4


def test_options_are_frozen_and_checked_when_made() -> None:
    options = agl.TrainingOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_staleness = 2  # type: ignore[misc]
    for bad, said in [({"max_staleness": -1}, "max_staleness must be"), ({"advantage": "ppo"}, "advantage must be"),
                      ({"schedule": {"batch_size": 2}}, "takes a Schedule"), ({"gateway_port": 70000}, "gateway_port"),
                      ({"collect_timeout_s": 0}, "collect_timeout_s")]:  # fmt: skip
        with pytest.raises((ValueError, TypeError), match=said):
            agl.TrainingOptions(**bad)
    with pytest.raises(ValueError, match="top_p"):
        agl.Sampling(top_p=2.0)
    with pytest.raises(ValueError, match="'jsonl' needs a log_dir"):
        agl.Trackers(logger=("jsonl",))


def test_verl_refuses_what_its_config_owns_saying_where_it_is_set() -> None:
    with pytest.raises(ValueError, match=r"VERL takes schedule from verl's config \(data.train_batch_size"):
        agl.VERL({}, agl.TrainingOptions(schedule=agl.Schedule()))


def test_a_run_and_a_runners_settings_are_frozen_values() -> None:
    settings, runner = agl.RunSettings(max_attempts=2), agl.RunnerOptions(max_concurrency=4)
    for value, name in ((settings, "max_attempts"), (runner, "max_concurrency")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, name, 9)
    with pytest.raises(ValueError, match="max_concurrency"):
        agl.RunnerOptions(max_concurrency=0)


def test_trainer_takes_its_run_and_runner_settings_as_values_and_the_old_keywords_with_a_warning() -> None:
    trainer = agl.Trainer(n_runners=0, progress=False, settings=agl.RunSettings(max_attempts=5),
                          runner_options=agl.RunnerOptions(max_concurrency=3))  # fmt: skip
    assert (trainer.settings.max_attempts, trainer.runner_options.max_concurrency) == (5, 3)
    with pytest.warns(DeprecationWarning, match=r"use Trainer\(settings=RunSettings\(span_wait_s=\.\.\.\)\)"):
        old = agl.Trainer(n_runners=0, progress=False, span_wait_s=7.0, max_rollouts=2)
    assert (old.settings.span_wait_s, old.runner_options.max_rollouts) == (7.0, 2)
    with pytest.raises(TypeError, match="pass it once"), pytest.warns(DeprecationWarning):
        agl.Trainer(settings=agl.RunSettings(max_attempts=2), max_attempts=4)
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['foo'\\]"):
        agl.Trainer(foo=1)
    own = [name for name in inspect.signature(agl.Trainer).parameters if name != "agent_lightning"]
    assert len(own) <= 10, own


def test_apo_takes_its_search_as_options_or_agent_lightnings_keywords() -> None:
    assert (
        agl.APO(use_litellm=True, beam_width=2).options
        == agl.APO(use_litellm=True, options=agl.APOOptions(beam_width=2)).options
    )
    with pytest.raises(TypeError, match="both as keywords and in options"):
        agl.APO(use_litellm=True, options=agl.APOOptions(beam_width=2), beam_width=3)
    with pytest.raises(ValueError, match="beam_rounds must be >= 1"):
        agl.APO(use_litellm=True, beam_rounds=0)
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['beam'\\]"):
        agl.APO(use_litellm=True, beam=2)
    own = [name for name in inspect.signature(agl.APO).parameters if name != "agent_lightning"]
    assert len(own) <= 10, own
