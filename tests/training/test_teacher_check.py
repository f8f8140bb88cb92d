"""The teacher check (`Distillation(check=True)`, `train --teacher-check`): before the first step, the validation
tasks answered by the student and by the teacher (the gateway puts the teacher's context before each of its calls), and
the run stopped unless the teacher scores higher. The replica here is the test server whose 'model' answers right only
when a system message tells it the answer: a context that tells it makes a better teacher, one that does not, not."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

import lightning_otel as agl
from lightning_otel.testing import OpenAITestServer
from lightning_otel.training.loop.backend import PolicyReplicas
from lightning_otel.training.loop.distillation import Distillation, Scorer
from lightning_otel.training.loop.loop import TrainingLoop
from lightning_otel.training.loop.samples import Sample
from lightning_otel.training.loop.schedule import Schedule
from lightning_otel.training.loop.teacher_check import TEACHER_NOTE, TeacherNotBetter
from tests.training.backends import RecordingBackend

AGENT = "tests.training.agents:answer_agent"
TASKS = [{"task_id": f"t{i}", "question": f"What is colour {i}?", "answer": f"colour-{i}"} for i in range(4)]
TOLD = "The answer is "


def told_answer(body: dict[str, Any]) -> str:
    """The 'model': the answer a system message gives it, else none."""
    for message in body.get("messages", []):
        if message.get("role") == "system" and str(message.get("content", "")).startswith(TOLD):
            return str(message["content"]).removeprefix(TOLD)
    return "no idea"


class ContextReadingBackend(RecordingBackend):
    """`RecordingBackend` whose replica answers as `told_answer`, and a teacher that scores every token -0.5."""

    name = "context-reading"

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.requests: list[dict[str, Any]] = []

    @contextmanager
    def serving(self) -> Iterator[PolicyReplicas]:
        def replies(body: dict[str, Any]) -> str:
            self.requests.append(body)
            return told_answer(body)

        with OpenAITestServer(replies) as server:
            self.server = server
            yield PolicyReplicas([server.base_url], "agl-tiny")

    def teacher(self, distillation: Distillation, temperature: float) -> Callable[[Sample], Scorer]:
        return lambda sample: lambda sequences: [[None, *itertools.repeat(-0.5, len(ids) - 1)] for ids in sequences]

    def teacher_context_ids(self, text: str) -> list[int]:
        return [1, 2, 3]


def train(
    collector: str, backend: ContextReadingBackend, context: str, val: Sequence[dict[str, Any]], max_staleness: int = 0,
    val_sampled: int = 2,
) -> Any:  # fmt: skip
    options = agl.TrainingOptions(
        schedule=Schedule(batch_size=2, group_size=2, max_steps=1, val_sampled=val_sampled),
        sampling=agl.Sampling(max_tokens=16),
        distillation=Distillation(context=context, check=True),
        max_staleness=max_staleness,
    )
    trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=TrainingLoop(backend, options), progress=False)
    return trainer.fit(AGENT, TASKS, list(val))


@pytest.mark.parametrize("max_staleness", [0, 1], ids=["synchronous", "asynchronous"])
def test_a_teacher_that_scores_higher_passes_the_check_and_the_run_trains(
    collector: str, tmp_path: Path, max_staleness: int
) -> None:
    backend = ContextReadingBackend(tmp_path)
    result = train(collector, backend, TOLD + "{answer}", TASKS[:2], max_staleness)
    start = result.validations[0].metrics
    assert start["teacher_check/student_reward_mean"] == 0.0 == start["val_sampled/reward_mean"]  # reused
    assert start["teacher_check/teacher_reward_mean"] == 1.0
    assert start["teacher_check_teacher/rollouts"] == 4  # 2 tasks x val_sampled 2
    told = [body for body in backend.requests if body["messages"][0]["role"] == "system"]
    assert len(told) == 4
    assert {body["messages"][0]["content"] for body in told} == {TOLD + "colour-0", TOLD + "colour-1"}
    assert all(body["messages"][1]["role"] == "user" for body in told)  # put before the agent's own messages
    assert [step for step, _ in backend.updates] == [1]  # then the run trained, its calls without the context
    assert len(backend.requests) == 2 + 4 + 4 + 4  # val, val_sampled, the check (the teacher's), step 1
    assert result.steps[0].metrics["distill/samples"] == 4
    # the rollout view labels the teacher's batch: a validation of its own, beside the student's two
    run = httpx.get(f"{collector}/v1/ui/runs").json()["runs"][0]
    validations = [(batch["note"], batch["rollouts"]) for batch in run["steps"] if batch["mode"] == "val"]
    assert validations == [(None, 2), (None, 4), (TEACHER_NOTE, 4)]


def test_a_teacher_no_better_than_the_student_stops_the_run_before_training(collector: str, tmp_path: Path) -> None:
    backend = ContextReadingBackend(tmp_path)
    with pytest.raises(TeacherNotBetter, match=r"x 2 .* mean reward student 0\.000, teacher .* 0\.000\. The"):
        train(collector, backend, "A hint: the answer starts with {answer}", TASKS[:2])
    assert backend.updates == []
    # a run that validates greedily only: the check samples the student's answers itself, once a task
    greedy_only = ContextReadingBackend(tmp_path)
    with pytest.raises(TeacherNotBetter, match=r"the validation tasks x 1 at the training sampling"):
        train(collector, greedy_only, "A hint: the answer starts with {answer}", TASKS[:2], val_sampled=0)
    assert len(greedy_only.requests) == 2 + 2 + 2 and greedy_only.updates == []  # val, the student's, the teacher's


def test_the_check_needs_validation_tasks_and_a_served_teacher(collector: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the teacher check answers the validation tasks"):
        train(collector, ContextReadingBackend(tmp_path), TOLD + "{answer}", [])
    with pytest.raises(ValueError, match="a teacher model is not served"):
        Distillation(teacher=tmp_path, check=True)
