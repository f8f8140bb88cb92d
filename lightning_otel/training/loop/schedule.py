"""Which tasks each step trains on, and when the loop validates and saves.

    Schedule(batch_size=8, group_size=4, epochs=2, max_steps=None, val_every=5, save_every=10)

Steps walk the train tasks `batch_size` at a time, epoch after epoch (reshuffled per epoch with `shuffle`, from
`seed`); `drop_last` leaves out an epoch's last, smaller batch (verl's dataloader does). `max_steps` cuts the run
short, or, past the epochs' steps, goes round the tasks again. Each task runs `group_size` times per step (one group).
`max_seconds`: a time budget for the steps: no step starts that would end past it at the steps' pace so far, and the
step before it is the last one (it validates and saves as the last one does).

Validation runs the val tasks `val_group_size` times each: before the first step (`val_at_start`), every `val_every`
steps and after the last one (both only with `val_every > 0`). With `val_sampled` > 0 each validation also runs the
val tasks that many times at the training sampling (the policy being trained, not only its greedy face). A
checkpoint is saved every `save_every` steps and after the last one (with `save_every > 0`). `resume`: start after the
backend's latest checkpoint.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Schedule:
    batch_size: int = 8
    group_size: int = 4
    epochs: int = 1
    max_steps: int | None = None
    shuffle: bool = False
    seed: int = 0
    drop_last: bool = False
    val_every: int = 0
    val_at_start: bool = True
    val_group_size: int = 1
    val_sampled: int = 0
    max_seconds: float | None = None
    save_every: int = 0
    resume: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.group_size < 1 or self.val_group_size < 1:
            raise ValueError("batch_size, group_size and val_group_size must be >= 1")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0 (or None: no time budget), got {self.max_seconds}")
        if self.val_sampled < 0:
            raise ValueError(f"val_sampled must be >= 0 (0: validation at the validation sampling only), got "
                             f"{self.val_sampled}")  # fmt: skip
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 (or None: the epochs decide), got {self.max_steps}")

    def steps(self, tasks: Sequence[Any]) -> list[list[Any]]:
        """Every step's tasks, in order."""
        tasks = list(tasks)
        if not tasks:
            raise ValueError("no train tasks to schedule")
        if self.drop_last and len(tasks) < self.batch_size:
            raise ValueError(f"{len(tasks)} train tasks make no full batch of {self.batch_size}")
        order = random.Random(self.seed)
        steps: list[list[Any]] = []
        epoch = 0
        while self.max_steps is None or len(steps) < self.max_steps:
            if epoch >= self.epochs and self.max_steps is None:
                break
            shuffled = list(tasks)
            if self.shuffle:
                order.shuffle(shuffled)
            end = len(shuffled) - (len(shuffled) % self.batch_size if self.drop_last else 0)
            steps += [shuffled[start : start + self.batch_size] for start in range(0, end, self.batch_size)]
            epoch += 1
        return steps[: self.max_steps] if self.max_steps is not None else steps

    def epoch_of(self, step: int, tasks: int) -> int:
        """The epoch (from 0) a step (from 1) belongs to."""
        per_epoch = tasks // self.batch_size if self.drop_last else -(-tasks // self.batch_size)
        return (step - 1) // max(per_epoch, 1)

    def validates_after(self, step: int, last: int) -> bool:
        return self.val_every > 0 and (step % self.val_every == 0 or step == last)

    def saves_after(self, step: int, last: int) -> bool:
        return self.save_every > 0 and (step % self.save_every == 0 or step == last)
