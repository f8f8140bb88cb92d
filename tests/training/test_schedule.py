"""The loop's schedule: tasks per step over epochs, verl's dropped last batch, going round again past the epochs,
a reproducible shuffle, and when to validate and save."""

from __future__ import annotations

import pytest

from lightning_otel.training.loop.schedule import Schedule

TASKS = list(range(10))


def test_steps_walk_the_tasks_epoch_after_epoch() -> None:
    assert Schedule(batch_size=4, epochs=2).steps(TASKS) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] * 2
    assert Schedule(batch_size=4, epochs=2, drop_last=True).steps(TASKS) == [[0, 1, 2, 3], [4, 5, 6, 7]] * 2
    assert Schedule(batch_size=4, max_steps=2).steps(TASKS) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(Schedule(batch_size=4, max_steps=7).steps(TASKS)) == 7  # past the epoch: round again
    assert Schedule(batch_size=4, max_steps=7, epochs=1000).steps(TASKS)[3] == [0, 1, 2, 3]


def test_shuffle_is_reproducible_and_differs_between_epochs() -> None:
    first = Schedule(batch_size=5, epochs=2, shuffle=True, seed=3).steps(TASKS)
    assert first == Schedule(batch_size=5, epochs=2, shuffle=True, seed=3).steps(TASKS)
    assert sorted(first[0] + first[1]) == TASKS and first[:2] != first[2:]
    assert first != Schedule(batch_size=5, epochs=2, shuffle=True, seed=4).steps(TASKS)


def test_validation_and_checkpoints_every_k_steps_and_after_the_last() -> None:
    schedule = Schedule(val_every=2, save_every=3)
    assert [step for step in range(1, 8) if schedule.validates_after(step, 7)] == [2, 4, 6, 7]
    assert [step for step in range(1, 8) if schedule.saves_after(step, 7)] == [3, 6, 7]
    assert not any(Schedule().validates_after(step, 7) or Schedule().saves_after(step, 7) for step in range(1, 8))
    assert Schedule(batch_size=4, drop_last=True).epoch_of(3, 10) == 1


def test_bad_schedules_are_refused() -> None:
    with pytest.raises(ValueError, match="no train tasks"):
        Schedule().steps([])
    with pytest.raises(ValueError, match="no full batch"):
        Schedule(batch_size=20, drop_last=True).steps(TASKS)
    with pytest.raises(ValueError, match="max_steps"):
        Schedule(max_steps=0)
