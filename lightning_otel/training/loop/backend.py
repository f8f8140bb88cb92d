"""What a training backend implements under the loop: only what differs between engines.

    class MyBackend(Backend):
        def update(self, samples, step):        # samples with advantages (or weights) -> the engine's metrics
            ...
        def publish(self, version):             # serve the current weights as this policy version
            ...

The loop calls, per step: the runners' rollouts through the policy gateway in front of `serving()`'s replicas,
`pause_serving()` once they are in, `update(samples, step)` when some sample can move the policy (raise
`NothingToUpdate` when the backend finds none can), `prepare_publish(version)` then `publish(version)` (after a
skipped step too: replicas that rested wake up), then `save(step)` on the checkpoint schedule. `load()` before the
first step returns the step to resume after (0: a fresh start), and the loop publishes that version first;
`finish()` after the last step.

One version count, the loop's: the weights published after step k are policy version k (the first weights served,
version 0; after a resume from step k, version k). A backend serves them under that number (its replicas name it on
every answer: `agl.llm.policy_version` on the LLM spans), never under a count of its own, so the console, the
metrics, each rollout's record, each span, the export and the rollout view say the same number. A step that trained
nothing publishes the same weights under its own number.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from lightning_otel.training.loop.advantages import AdvantageEstimator, GroupAdvantage
from lightning_otel.training.loop.credit import advantage_estimator
from lightning_otel.training.loop.distillation import Distillation, Scorer
from lightning_otel.training.loop.samples import Sample


@dataclass(frozen=True, slots=True)
class PolicyReplicas:
    """OpenAI-compatible servers of the policy (vLLM-format token ids), which the gateway forwards to."""

    urls: list[str]
    model: str
    policies: tuple[str, ...] = ()  # a policy per agent: served under these names beside `model` (the base)


class NothingToUpdate(Exception):
    """Raised by `Backend.update`: none of the samples could be trained (`reasons` say why)."""

    def __init__(self, reasons: Sequence[str], metrics: dict[str, float] | None = None) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = list(reasons)
        self.metrics = dict(metrics or {})


class Backend(abc.ABC):
    name: ClassVar[str] = "backend"  # in the loop's log lines
    # True: samples are the calls' chat messages (`Sample.example`; content must be captured), not token ids,
    # selected by `agent_match` (None: the trainer's adapter's)
    learns_from_text: ClassVar[bool] = False
    agent_match: str | None = None
    # True: its replicas keep serving while `update` runs, so the loop may train asynchronously (`max_staleness`);
    # otherwise `why_not_async` says why not.
    serves_while_updating: bool = True
    why_not_async: str = ""
    # True: `publish` swaps weights so that each request is answered wholly by the weights it began with (a sampler
    # swapped by reference, a replica that loads weights between batches): asynchronous training need not hold the
    # gateway around it. False (the safe default): the gateway holds new requests and drains those in flight.
    atomic_weight_swap: bool = False
    # True: `use_policies` makes it train a policy per agent (agent_match as a mapping: `adapters.policy_match`)
    policy_per_agent: bool = False

    def use_policies(self, policies: Sequence[str]) -> None:
        """Before `serving`: train these policies, each on its own agents' samples (`Sample.triplet.policy`), each
        served under its name beside the base model."""
        raise ValueError(f"the {self.name} backend trains one policy: agent_match as a mapping of agents to policies "
                         f"({', '.join(policies)}) needs one that trains a policy per agent (Tinker)")  # fmt: skip

    @contextlib.contextmanager
    def serving(self) -> Iterator[PolicyReplicas | None]:
        """The replicas serving the policy while the loop runs (None: nothing is served; the agents call the LLM
        resources they were given, as SFT's teacher)."""
        yield None

    def pause_serving(self) -> None:  # noqa: B027  (most backends keep serving: nothing to do)
        """The step's rollouts are in: replicas may rest until `publish` (verl frees their GPU memory)."""

    @abc.abstractmethod
    def update(self, samples: Sequence[Sample], step: int) -> dict[str, float]:
        """Train on the step's samples (each with its advantage, or weight); return the engine's metrics."""

    def teacher(self, distillation: Distillation, temperature: float) -> Callable[[Sample], Scorer]:
        """On-policy distillation's teacher for each sample (`training.loop.distillation`), asked once when the loop
        starts; a backend that cannot score token ids refuses it here."""
        raise ValueError(f"on-policy distillation trains with the tinker backend, not {self.name}: it scores the "
                         "sampled token ids with the local engine")  # fmt: skip

    def teacher_context_ids(self, text: str) -> list[int]:
        """The teacher's privileged context as the ids put before a prompt: a system turn in the chat template."""
        raise ValueError(f"the {self.name} backend has no chat tokenizer for the teacher's context")

    def idle_metrics(self) -> dict[str, float]:
        """The backend's metrics for a step it did not train (zeros), so every step logs the same names."""
        return {}

    def estimator(self, advantage: str | AdvantageEstimator) -> AdvantageEstimator:
        """The estimator for `TrainingOptions.advantage`: "grpo" (this backend's GRPO), "anchor" (per-call credit
        with the same settings) or the user's own estimator, as it is."""
        return advantage_estimator(advantage, GroupAdvantage())

    def prepare_publish(self, version: int) -> None:  # noqa: B027  (most backends have nothing to prepare)
        """Before `publish`, while the replicas still serve: the slow part of making the new weights servable (a
        snapshot, a copy), so that asynchronous training holds the gateway only for the swap itself."""

    def publish(self, version: int) -> None:  # noqa: B027  (a backend that serves nothing has nothing to publish)
        """Serve the current weights as policy version `version` (see the module docstring: the loop's count)."""

    def save(self, step: int) -> str | None:
        """A checkpoint after `step`; where it is."""
        return None

    def load(self) -> int:
        """Resume from the latest checkpoint when the backend is configured to: the step it was saved after."""
        return 0

    def finish(self) -> dict[str, float]:
        """After the last step; metrics to report."""
        return {}
