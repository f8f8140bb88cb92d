"""`BatchProgress`: a rich progress bar per batch of rollouts on a terminal (what `Trainer.fit` shows for an algorithm
that shows no progress of its own, `Baseline`); nothing elsewhere, so logs stay readable in CI."""

from __future__ import annotations

from typing import Any

from lightning_otel.runtime.rollout_batch import RolloutBatch


class BatchProgress:
    """A rich progress bar per batch on a terminal; nothing otherwise (logs stay readable in CI)."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self._progress: Any = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> BatchProgress:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True
            )
            self._progress.start()
        return self

    def update(self, batch: RolloutBatch, done: int, total: int) -> None:
        if self._progress is None:
            return
        task = self._tasks.get(batch.batch_id)
        if task is None:
            task = self._tasks[batch.batch_id] = self._progress.add_task(f"{batch.mode} {batch.batch_id}", total=total)
        self._progress.update(task, completed=done)
        if done >= total:  # one bar per batch in flight, not one per batch ever run
            self._progress.remove_task(self._tasks.pop(batch.batch_id))

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()
