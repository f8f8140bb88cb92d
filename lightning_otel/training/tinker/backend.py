"""The Tinker-shaped engine as a backend of the training loop: datums from the samples, `forward_backward` +
`optim_step`, and the new weights' sampler served to the agents (vLLM's format, behind the loop's gateway)."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from lightning_otel.training.loop.backend import Backend, NothingToUpdate, PolicyReplicas
from lightning_otel.training.loop.samples import Sample
from lightning_otel.training.tinker.datums import sample_datums
from lightning_otel.training.tinker.engine import EngineSamplerReplica, TrainingEngine
from lightning_otel.training.tinker.types import AdamParams


class TinkerBackend(Backend):
    """`engine` (LocalEngine, RemoteEngine or yours) trained with `loss_fn` and `adam`; `keep_constant_groups`: also
    train on groups whose rewards are all equal; `resume`: start from the latest `step-N` state under the engine's
    log_dir."""

    name = "tinker"

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
        optim = self.engine.optim_step(self.adam)
        self._trained_since_publish = True
        metrics["train/loss_sum"] = output.metrics.get("loss:sum", math.nan)
        metrics["train/grad_norm"] = optim.metrics.get("grad_norm", math.nan)
        return metrics

    def publish(self, step: int) -> int:
        assert self.replica is not None, "publish() runs inside serving()"
        if self._trained_since_publish:  # a skipped step keeps serving the same sampler (and version)
            version = self.replica.weight_version + 1
            self.replica.use(self.engine.save_weights_and_get_sampler(f"step-{version}"))
            self._trained_since_publish = False
        return self.replica.weight_version

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
