"""Check the teacher before self-distilling: is the policy, given its privileged context, the better policy?

Self-distillation pulls the student toward what its teacher would say, at every sampled token of every step (GRPO's
signal reaches only the groups whose rewards differ). A teacher that does the task no better than the student pulls
it toward a policy no better: on FrozenLake, SmolLM2 shown a shortest safe path named a move less often than without
it, and self-distilling toward that lost the move format in one update (docs/models.md).

`Distillation(check=True)` (`lightning-otel train --teacher-check`): before the first step, the validation tasks are
answered at the training sampling (what the teacher's scores express) by the student, and by the teacher: the same
policy, with the gateway putting the task's context as a system message before every chat call of those rollouts
(`PolicyGateway.put_context`), as the loop's teacher reads it. The run goes on only if the teacher's mean reward is
higher; otherwise it stops before training, both figures said (`TeacherNotBetter`). A call whose messages begin with
no system message differs in one way: the loop's teacher also sees the chat template's default system turn, if any.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from lightning_otel.runtime.rollout_batch import RolloutBatch
from lightning_otel.runtime.sample_diagnosis import NothingTrained
from lightning_otel.training.loop.distillation import Distillation

TEACHER_NOTE = "teacher check: the policy with the teacher's context"  # the rollout view's label for its rollouts
# the validation that answers each task `n` times at the training sampling: `context_of(task)` before each call
# (None: the student's), the metrics under `prefix/`
Validate = Callable[[str, int, Callable[[Any], str] | None], dict[str, float]]


class TeacherNotBetter(NothingTrained):
    """The teacher did not score higher than the student on the validation tasks: the run stopped before training."""


def require_val_tasks(distillation: Distillation | None, val_tasks: Sequence[Any], val_at_start: bool) -> None:
    """The check compares answers to the validation tasks before the first step: a run without them cannot check."""
    if distillation is not None and distillation.check and not (val_tasks and val_at_start):
        raise ValueError("the teacher check answers the validation tasks before the first step: give validation "
                         "tasks (--val) and validate at the start")  # fmt: skip


def rollout_contexts(batch: RolloutBatch, context_of: Callable[[Any], str] | None) -> dict[str, str]:
    """Each queued rollout's context, from its task (none without `context_of`)."""
    if context_of is None:
        return {}
    return {record["rollout_id"]: context_of(record["input"]) for record in batch.records}


def check_teacher(
    validate: Validate, distillation: Distillation | None, metrics: dict[str, float], log_step: Callable[..., None],
    *, resumed: int, n: int,
) -> None:  # fmt: skip
    """The check, before the first step of a run that asks for it: its metrics (`teacher_check/*`) added to `metrics`,
    the step-0 validation's, whose `val_sampled/` figures are the student's when the run validates sampled (else the
    student is validated here too); `log_step(note=...)` logs them, with the check's line, with or without a check.
    Then raises `TeacherNotBetter` when the teacher's mean reward is not higher."""
    if distillation is None or not distillation.check or resumed:  # resumed: checked when the run began
        log_step(note="")
        return
    if "val_sampled/reward_mean" in metrics:
        student = {f"teacher_check_student/{key.split('/', 1)[1]}": value for key, value in metrics.items()
                   if key.startswith("val_sampled/")}  # fmt: skip
    else:  # the run validates greedily only: the student's answers sampled here
        student = validate("teacher_check_student", n, None)
    teacher = validate("teacher_check_teacher", n, distillation.context_for)
    ours = student.get("teacher_check_student/reward_mean", math.nan)
    theirs = teacher.get("teacher_check_teacher/reward_mean", math.nan)
    metrics.update({"teacher_check/student_reward_mean": ours, "teacher_check/teacher_reward_mean": theirs,
                    **student, **teacher})  # fmt: skip
    line = (f"teacher check, the validation tasks x {n} at the training sampling: mean reward student {ours:.3f}, "
            f"teacher (the policy with {distillation.context!r}) {theirs:.3f}")  # fmt: skip
    log_step(note=line)  # in the run's metrics either way
    if not theirs > ours:  # NaN (no rollout scored) is not higher either
        raise TeacherNotBetter(f"{line}. The teacher is not the better policy: self-distilling would pull the student "
                               "toward it. Give the teacher a context it can use, or train without the check (no "
                               "--teacher-check; check=False).")  # fmt: skip


__all__ = ["TEACHER_NOTE", "TeacherNotBetter", "Validate", "check_teacher", "require_val_tasks", "rollout_contexts"]
