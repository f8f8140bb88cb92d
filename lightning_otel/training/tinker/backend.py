"""The Tinker-shaped engine as a backend of the training loop: datums from the samples, `forward_backward` +
`optim_step`, and the new weights' sampler served to the agents (vLLM's format, behind the loop's gateway)."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_otel.training.loop.advantages import AdvantageEstimator, GroupAdvantage, UniformWeight
from lightning_otel.training.loop.backend import Backend, NothingToUpdate, PolicyReplicas
from lightning_otel.training.loop.credit import advantage_estimator
from lightning_otel.training.loop.samples import Sample
from lightning_otel.training.tinker.datums import COOKBOOK_ADVANTAGE, DatumBatch, sample_datums
from lightning_otel.training.tinker.engine import EngineSamplerReplica, TrainingEngine
from lightning_otel.training.tinker.types import AdamParams


class TinkerBackend(Backend):
    """`engine` (LocalEngine, RemoteEngine or yours) trained with `loss_fn` and `adam`; `keep_constant_groups`: also
    train on groups whose rewards are all equal; `resume`: start from the latest `step-N` state under the engine's
    log_dir."""

    name = "tinker"
    atomic_weight_swap = True  # a sampler swapped by reference: a request in flight ends on the one it began with

    def __init__(
        self,
        engine: TrainingEngine,
        *,
        loss_fn: str,
        loss_fn_config: Mapping[str, float] | None,
        adam: AdamParams,
        keep_constant_groups: bool = False,
        model_name: str = "agl-policy",
        resume: bool = False,
    ) -> None:
        self.engine, self.loss_fn, self.loss_fn_config, self.adam = engine, loss_fn, dict(loss_fn_config or {}), adam
        self.keep_constant_groups, self.model_name, self.resume = keep_constant_groups, model_name, resume
        self.replica: EngineSamplerReplica | None = None
        self._trained_since_publish = False
        self._next_sampler: Any = None  # prepare_publish's snapshot of the new weights, swapped in by publish

    @contextlib.contextmanager
    def serving(self) -> Iterator[PolicyReplicas]:
        from lightning_otel.serving.sampler_api import ReplicaServer

        sampler = self.engine.save_weights_and_get_sampler("step-0")
        self.replica = EngineSamplerReplica(sampler, self.engine.chat_tokenizer, model_name=self.model_name)
        with ReplicaServer(self.replica) as server:
            yield PolicyReplicas([server.base_url], self.model_name)

    def idle_metrics(self) -> dict[str, float]:
        return {"train/datums": 0.0, "train/tokens": 0.0}

    def update(self, samples: Sequence[Sample], step: int) -> dict[str, float]:
        built = sample_datums(samples, loss_fn=self.loss_fn, keep_constant_groups=self.keep_constant_groups)
        metrics = {
            "train/datums": float(len(built.datums)),
            "train/tokens": float(built.trained_tokens),
            "train/groups": float(built.groups),
            "train/constant_groups": float(built.constant_groups),
            "train/samples_without_logprobs": float(built.samples_without_logprobs),
        }
        if not built.datums:
            raise NothingToUpdate(
                [f"no datum: {built.groups} groups, {built.constant_groups} with no non-zero advantage, "
                 f"{built.samples_without_logprobs} samples without logprobs"], metrics
            )  # fmt: skip
        output = self.engine.forward_backward(built.datums, self.loss_fn, self.loss_fn_config)
        if self.loss_fn != "cross_entropy":
            metrics.update(logprob_gaps(built, output.loss_fn_outputs))
        optim = self.engine.optim_step(self.adam)
        self._trained_since_publish = True
        metrics["train/loss_sum"] = output.metrics.get("loss:sum", math.nan)
        metrics["train/grad_norm"] = optim.metrics.get("grad_norm", math.nan)
        return metrics

    def estimator(self, advantage: str | AdvantageEstimator) -> AdvantageEstimator:
        """tinker-cookbook's GRPO (reward - the group's mean; "anchor": per-call credit on the same baseline); the
        `cross_entropy` loss weighs every sample alike (supervised) unless given an estimator of its own."""
        if self.loss_fn == "cross_entropy" and not isinstance(advantage, AdvantageEstimator):
            if advantage != "grpo":
                raise ValueError(f"advantage={advantage!r} needs a policy-gradient loss, not loss_fn='cross_entropy'")
            return UniformWeight()
        return advantage_estimator(advantage, GroupAdvantage(**COOKBOOK_ADVANTAGE))  # type: ignore[arg-type]

    def prepare_publish(self, version: int) -> None:
        """The new weights' sampler (a snapshot: the slow part), made while the current one still serves."""
        if self._trained_since_publish and self._next_sampler is None:  # a skipped step keeps the same sampler
            self._next_sampler = self.engine.save_weights_and_get_sampler(f"step-{version}")

    def publish(self, version: int) -> None:  # a reference swap: requests in flight end on the sampler they began with
        assert self.replica is not None, "publish() runs inside serving()"
        self.prepare_publish(version)  # when the loop did not
        sampler = self._next_sampler if self._next_sampler is not None else self.replica.sampler
        self.replica.use(sampler, version)  # a skipped step: the same weights, under this version
        self._next_sampler, self._trained_since_publish = None, False

    def save(self, step: int) -> str:
        return self.engine.save_state(f"step-{step}")

    def load(self) -> int:
        if not self.resume:
            return 0
        folder = getattr(self.engine, "log_dir", None)
        states = sorted(
            (int(match[1]), path)
            for path in (Path(folder) / "checkpoints").glob("step-*")
            if (match := re.fullmatch(r"step-(\d+)", path.name))
        ) if folder is not None else []  # fmt: skip
        if not states:
            return 0
        step, path = states[-1]
        self.engine.load_state(str(path))
        self._trained_since_publish = True  # the loaded weights are served from the first step
        return step


def logprob_gaps(built: DatumBatch, outputs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean |trainer - sampler| logprob over the trained tokens (those with a sampler logprob), per staleness: how
    far the sampled policy is from the one being trained (`async/logprob_gap_staleness_K`)."""
    sums: dict[int, list[float]] = {}
    for datum, output, staleness in zip(built.datums, outputs, built.staleness, strict=False):
        sampled = datum.loss_fn_inputs["logprobs"]
        trained = output.get("logprobs") or []
        gaps = [abs(t - s) for t, s in zip(trained, sampled, strict=False) if s != 0.0]
        total = sums.setdefault(staleness, [0.0, 0.0])
        total[0] += sum(gaps)
        total[1] += len(gaps)
    return {f"async/logprob_gap_staleness_{k}": v[0] / v[1] for k, v in sorted(sums.items()) if v[1]}
