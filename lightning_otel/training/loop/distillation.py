"""On-policy distillation: a teacher scores the tokens the student sampled, and its per-token signal trains them.

For each sample (one selected LLM call: the prompt's ids and the response's ids as sampled, with their logprobs), the
teacher computes the logprob of every response token given the prompt, in its own context. A token's signal is
`weight * (teacher logprob - sampled logprob)`, the per-token reverse KL the Tinker cookbook's on-policy distillation
trains (`recipes/distillation`): tokens the teacher finds likelier than the student did are reinforced, the others
pushed down. Unlike a reward it is dense: a group whose rewards all tie still has a signal at every token.

- **Self-distillation** (`teacher=None`): the teacher is the policy itself with privileged context the student does
  not see, a template filled from the task (`"A correct query: {query}"`), put before the prompt as a system turn
  (the Tinker cookbook's `sdft`, prime-rl's `opsd`). Its weights are the policy's as last published.
- **A teacher model** (`teacher="path/to/model"`): another model folder with the same tokenizer, frozen.

The signal is added to the sample's reward advantage (GRPO's), or trains alone (`alone=True`). The teacher's
logprobs stay with the sample (`Sample.teacher_logprobs`). `check=True` first measures whether the teacher is the
better policy (`teacher_check`): self-distillation pulls the student toward whatever its teacher does. Backends that
train token ids from the local engine do it (Tinker); the others refuse it when the loop starts.
"""

from __future__ import annotations

import math
import string
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from lightning_otel.training.loop.samples import Sample


class TeachingBackend(Protocol):
    """What a backend gives the teacher (`Backend.teacher`, `Backend.teacher_context_ids`)."""

    def teacher(self, distillation: Distillation, temperature: float) -> Callable[[Sample], Scorer]: ...

    def teacher_context_ids(self, text: str) -> list[int]: ...


# sequences of ids -> each id's logprob given those before it (the first: None), many sequences at once (batched)
Scorer = Callable[[Sequence[Sequence[int]]], Sequence[Sequence[float | None]]]


@dataclass(frozen=True, slots=True)
class Distillation:
    """See the module docstring. `weight`: the teacher's per-token signal against the reward advantage; `context`:
    the teacher's privileged context, `{field}`s filled from the task; `teacher`: a model folder (None: the policy
    itself); `alone`: the teacher's signal only (the reward advantage is not trained); `check`: before the first
    step, the validation tasks answered by the student and by the teacher, and the run stopped unless the teacher
    scores higher (`teacher_check`)."""

    weight: float = 1.0
    context: str = ""
    teacher: str | Path | None = None
    alone: bool = False
    check: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"distillation weight must be > 0, got {self.weight!r}")
        if self.teacher is None and not self.context:
            raise ValueError("self-distillation (no teacher model) needs a context the student does not see, filled "
                             "from the task: Distillation(context='A correct answer: {answer}')")  # fmt: skip
        if self.check and self.teacher is not None:
            raise ValueError("the teacher check runs the policy with its context through the gateway; a teacher "
                             "model is not served there: validate it as a policy (train --model TEACHER)")  # fmt: skip

    @property
    def fields(self) -> list[str]:
        """The task fields the context names."""
        return [name for _, name, _, _ in string.Formatter().parse(self.context) if name]

    def context_for(self, task: Any) -> str:
        """The context for one task (a dict, or a plain value for `{}` / `{task}`)."""
        if not self.context:
            return ""
        values = dict(task) if isinstance(task, Mapping) else {"task": task}
        missing = [name for name in self.fields if name not in values]
        if missing:
            raise ValueError(f"the teacher's context names {missing} but the task has only {sorted(values)}")
        return self.context.format(**values)


def distill(
    samples: Sequence[Sample],
    distillation: Distillation,
    score: Callable[[Sample], Scorer],
    context_ids: Callable[[str], list[int]],
    task_of: Mapping[str, Any],
) -> dict[str, float]:
    """Each sample's teacher logprobs and per-token signal (`Sample.teacher_logprobs`, `Sample.token_advantages`);
    `score(sample)`: the teacher that scores it, the same for every sample of a policy (the step's samples of a
    policy are scored in one call, batched); `context_ids(text)`: the context as the ids put before the prompt;
    `task_of`: each rollout's task. Returns the `distill/*` metrics."""
    began = time.monotonic()
    contexts: dict[str, list[int]] = {}  # each task's context tokenized once, not once a sample
    by_policy: dict[str | None, list[tuple[Sample, list[int]]]] = {}
    for sample in samples:
        triplet = sample.triplet
        if triplet is None or not triplet.response_token_ids or not triplet.response_logprobs:
            continue
        text = distillation.context_for(task_of.get(sample.rollout)) if distillation.context else ""
        if text not in contexts:
            contexts[text] = context_ids(text) if text else []
        ids = contexts[text] + list(triplet.prompt_token_ids) + list(triplet.response_token_ids)
        by_policy.setdefault(triplet.policy, []).append((sample, ids))
    gaps: list[float] = []
    teacher_total, scored = 0.0, 0
    for group in by_policy.values():
        answers = score(group[0][0])([ids for _, ids in group])
        for (sample, _), teacher_all in zip(group, answers, strict=True):
            teacher_total += _teach(sample, list(teacher_all), distillation, gaps)
            scored += 1
    tokens = len(gaps)
    moving = sum(1 for sample in samples if sample.advantage or any(sample.token_advantages or ()))
    return {
        # the estimator's count, now with the samples the teacher's signal moves (a tied group's among them)
        "training/samples_with_advantage": float(moving),
        "distill/samples": float(scored),
        "distill/tokens": float(tokens),
        # the sampled tokens' reverse KL estimate (student logprob - teacher logprob): falls as the student learns
        "distill/reverse_kl": sum(gaps) / tokens if tokens else math.nan,
        "distill/teacher_logprob": teacher_total / tokens if tokens else math.nan,
        "timing_s/distill": time.monotonic() - began,
    }


def _teach(sample: Sample, teacher_all: list[float | None], distillation: Distillation, gaps: list[float]) -> float:
    """One sample's teacher logprobs (the response's, the last of `teacher_all`) and per-token signal; each kept
    token's gap goes to `gaps`; returns the sum of the teacher's logprobs over them."""
    triplet = sample.triplet
    assert triplet is not None
    response = triplet.response_token_ids
    teacher = teacher_all[-len(response) :]
    mask = list(triplet.response_mask) if triplet.response_mask else [1] * len(response)
    sample.teacher_logprobs = [float(lp) if lp is not None else math.nan for lp in teacher]
    signal, total = [], 0.0
    for lp_teacher, lp_sampled, kept in zip(sample.teacher_logprobs, triplet.response_logprobs, mask, strict=True):
        if not kept or math.isnan(lp_teacher):
            signal.append(0.0)
            continue
        signal.append(distillation.weight * (lp_teacher - lp_sampled))
        gaps.append(lp_sampled - lp_teacher)
        total += lp_teacher
    sample.token_advantages = signal
    if distillation.alone:
        sample.advantage = 0.0
    return total


class Teacher:
    """The loop's teacher: the backend's scorer (asked when the loop is made: a backend that cannot score token ids
    refuses it then) and its context's ids, applied to each step's samples."""

    def __init__(self, backend: TeachingBackend, distillation: Distillation, temperature: float) -> None:
        self.distillation, self.score = distillation, backend.teacher(distillation, temperature)
        self.context_ids = backend.teacher_context_ids
        self.taught: list[Sample] = []

    @classmethod
    def of(
        cls, backend: TeachingBackend, distillation: Distillation | None, sampling: Mapping[str, Any]
    ) -> Teacher | None:
        """The teacher of a loop with these options (None: no distillation), at its training temperature."""
        return cls(backend, distillation, sampling.get("temperature", 1.0)) if distillation is not None else None

    def teach(self, samples: Sequence[Sample], task_of: Mapping[str, Any]) -> dict[str, float]:
        """The step's samples scored; `taught` holds them until the next step (their step span shows them)."""
        metrics = distill(samples, self.distillation, self.score, self.context_ids, task_of)
        self.taught = [sample for sample in samples if sample.teacher_logprobs is not None]
        return metrics


__all__ = ["Distillation", "Scorer", "Teacher", "distill"]
