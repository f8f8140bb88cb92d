"""The Tinker-shaped engine as a backend of the training loop: datums from the samples, `forward_backward` +
`optim_step`, and the new weights' sampler served to the agents (vLLM's format, behind the loop's gateway)."""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_otel.training.loop.advantages import AdvantageEstimator, GroupAdvantage, UniformWeight
from lightning_otel.training.loop.backend import Backend, NothingToUpdate, PolicyReplicas
from lightning_otel.training.loop.credit import advantage_estimator
from lightning_otel.training.loop.distillation import Distillation, Scorer
from lightning_otel.training.loop.samples import Sample
from lightning_otel.training.tinker.datums import COOKBOOK_ADVANTAGE, DatumBatch, sample_datums
from lightning_otel.training.tinker.engine import EngineSamplerReplica, TrainingEngine
from lightning_otel.training.tinker.saved_state import state_complete
from lightning_otel.training.tinker.types import AdamParams

log = logging.getLogger("lightning_otel.tinker")


class TinkerBackend(Backend):
    """`engine` (LocalEngine, RemoteEngine or yours) trained with `loss_fn` and `adam`; `keep_constant_groups`: also
    train on groups whose rewards are all equal; `resume`: start from the latest `step-N` state under the engine's
    log_dir.

    A policy per agent (`use_policies`): each policy has its own engine (`engine.policy_engine(name)`: a LoRA adapter
    over the same base; or the engine `engines` names for it: a model of its own), is updated on its own agents'
    samples only, with its own optimizer state, and saved in its own folder (`checkpoints/step-N/<policy>`); a policy
    with nothing to learn in a step is skipped and said so while the others train. The base engine's first weights
    serve the calls no policy claims."""

    name = "tinker"
    atomic_weight_swap = True  # a sampler swapped by reference: a request in flight ends on the one it began with
    policy_per_agent = True

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
        engines: Mapping[str, TrainingEngine] | None = None,
    ) -> None:
        self.engine, self.loss_fn, self.loss_fn_config, self.adam = engine, loss_fn, dict(loss_fn_config or {}), adam
        self.keep_constant_groups, self.model_name, self.resume = keep_constant_groups, model_name, resume
        self.replica: EngineSamplerReplica | None = None
        self._given = dict(engines or {})  # a model per policy, as the user gave them
        self.policies: dict[str, TrainingEngine] = {}  # a policy per agent: name -> engine (empty: one policy)
        self._trained: set[str | None] = set()  # policies updated since the last publish (None: the one policy)
        self._next: dict[str | None, Any] = {}  # prepare_publish's snapshots of the new weights, swapped in by publish

    def use_policies(self, policies: Sequence[str]) -> None:
        if self._given and set(self._given) != set(policies):
            raise ValueError(f"Tinker was given engines for {sorted(self._given)} but agent_match names the policies "
                             f"{sorted(policies)}: give one engine per policy")  # fmt: skip
        for policy in policies:
            if policy in self._given:
                self.policies[policy] = self._given[policy]
            elif hasattr(self.engine, "policy_engine"):
                self.policies[policy] = self.engine.policy_engine(policy)
            else:
                raise ValueError(f"{type(self.engine).__name__} cannot serve several policies over its base (no "
                                 "policy_engine): give Tinker one engine per policy")  # fmt: skip

    @contextlib.contextmanager
    def serving(self) -> Iterator[PolicyReplicas]:
        from lightning_otel.serving.sampler_api import ReplicaServer

        if self._given and not self.policies:
            raise ValueError(f"Tinker was given engines for {sorted(self._given)}: agent_match must map agents to "
                             "those policies")  # fmt: skip
        sampler = self.engine.save_weights_and_get_sampler("step-0")  # with policies: the base, for unclaimed calls
        self.replica = EngineSamplerReplica(sampler, self.engine.chat_tokenizer, model_name=self.model_name)
        for policy, engine in self.policies.items():
            self.replica.use(engine.save_weights_and_get_sampler("step-0"), 0, policy=policy)
        with ReplicaServer(self.replica) as server:
            yield PolicyReplicas([server.base_url], self.model_name, tuple(self.policies))

    def idle_metrics(self) -> dict[str, float]:
        metrics = {"train/datums": 0.0, "train/tokens": 0.0}
        for policy in self.policies:
            metrics.update({f"policy/{policy}/datums": 0.0, f"policy/{policy}/tokens": 0.0,
                            f"policy/{policy}/skipped": 1.0})  # fmt: skip
        return metrics

    def update(self, samples: Sequence[Sample], step: int) -> dict[str, float]:
        if not self.policies:
            metrics = self._update(self.engine, samples)
            self._trained.add(None)
            return metrics
        metrics: dict[str, float] = {}
        reasons = []
        for policy, engine in self.policies.items():
            mine = [sample for sample in samples if sample.triplet is not None and sample.triplet.policy == policy]
            try:
                trained = self._update(engine, mine)
            except NothingToUpdate as nothing:
                trained = {**nothing.metrics, "train/skipped": 1.0}
                reasons.append(f"policy {policy}: {nothing}")
                log.warning("step %d: policy %s trained nothing (the others train): %s", step, policy, nothing)
            else:
                trained["train/skipped"] = 0.0
                self._trained.add(policy)
            metrics.update({f"policy/{policy}/{key.removeprefix('train/')}": v for key, v in trained.items()})
        for key in ("datums", "tokens", "groups", "constant_groups", "samples_without_logprobs"):
            metrics[f"train/{key}"] = sum(metrics.get(f"policy/{policy}/{key}", 0.0) for policy in self.policies)
        metrics["train/policies_trained"] = float(len(self.policies) - len(reasons))
        if len(reasons) == len(self.policies):
            raise NothingToUpdate(reasons, metrics)
        return metrics

    def _update(self, engine: TrainingEngine, samples: Sequence[Sample]) -> dict[str, float]:
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
                [f"no datum: {len(samples)} samples in {built.groups} groups, {built.constant_groups} groups with no "
                 f"non-zero advantage, {built.samples_without_logprobs} samples without logprobs"], metrics
            )  # fmt: skip
        output = engine.forward_backward(built.datums, self.loss_fn, self.loss_fn_config)
        if self.loss_fn != "cross_entropy":
            metrics.update(logprob_gaps(built, output.loss_fn_outputs))
        optim = engine.optim_step(self.adam)
        metrics["train/loss_sum"] = output.metrics.get("loss:sum", math.nan)
        # tokens the engine computed (a group's shared prompt once, on the local engine), against `train/tokens`
        metrics["train/computed_tokens"] = output.metrics.get("computed_tokens:sum", math.nan)
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

    def _engine_of(self, policy: str | None) -> TrainingEngine:
        return self.engine if policy is None else self.policies[policy]

    def teacher(self, distillation: Distillation, temperature: float) -> Callable[[Sample], Scorer]:
        """The policy that sampled each call, as last published (self-distillation), or a frozen teacher model; it
        scores many sequences at once (batched by their shared prompt)."""
        if distillation.teacher is not None:
            frozen = teacher_sampler(distillation.teacher, self.engine)
            return lambda sample: lambda sequences: frozen.compute_logprobs_many(sequences, temperature)

        def current(sample: Sample) -> Scorer:
            assert self.replica is not None, "the teacher scores while the replica serves"
            policy = sample.triplet.policy if sample.triplet is not None and self.policies else None
            sampler = self.replica.policy_sampler(policy) if policy else self.replica.sampler
            if not hasattr(sampler, "compute_logprobs_many"):
                raise ValueError(f"{type(sampler).__name__} cannot score token ids: self-distillation needs a sampler "
                                 "with compute_logprobs (the local engine's, Tinker's)")  # fmt: skip
            return lambda sequences: sampler.compute_logprobs_many(sequences, temperature)

        return current

    def teacher_context_ids(self, text: str) -> list[int]:
        tokenizer = self.engine.chat_tokenizer
        return list(tokenizer.encode(tokenizer.render_chat([{"role": "system", "content": text}],
                                                           add_generation_prompt=False)))  # fmt: skip

    def prepare_publish(self, version: int) -> None:
        """The new weights' samplers (snapshots: the slow part), made while the current ones still serve; a policy
        that did not train keeps its sampler."""
        for policy in self._trained - set(self._next):
            self._next[policy] = self._engine_of(policy).save_weights_and_get_sampler(f"step-{version}")

    def publish(self, version: int) -> None:  # a reference swap: requests in flight end on the sampler they began with
        assert self.replica is not None, "publish() runs inside serving()"
        self.prepare_publish(version)  # when the loop did not
        if self.policies:
            for policy in self.policies:  # a policy that did not train: the same weights, under this version
                self.replica.use(self._next.get(policy) or self.replica.policy_sampler(policy), version, policy=policy)
            self.replica.use(self.replica.sampler, version)  # the base never trains
        else:
            self.replica.use(self._next.get(None) or self.replica.sampler, version)
        self._next, self._trained = {}, set()

    def save(self, step: int) -> str:
        if not self.policies:
            return self.engine.save_state(f"step-{step}")
        # every policy's state in `<log_dir>/checkpoints/step-N/<policy>` (an adapter engine's save puts it there)
        paths = [
            engine.save_state(f"step-{step}" if policy not in self._given else f"step-{step}/{policy}")
            for policy, engine in self.policies.items()
        ]
        folders = {str(Path(path).parent) for path in paths}
        return folders.pop() if len(folders) == 1 else ", ".join(paths)

    def load(self) -> int:
        if not self.resume:
            return 0
        engines = self.policies or {"": self.engine}  # a policy per agent: a step counts when every state is there
        found: set[int] | None = None
        for policy, engine in engines.items():
            steps = set(_saved_steps(getattr(engine, "log_dir", None), policy))
            found = steps if found is None else found & steps
        if not found:
            return 0
        step = max(found)
        for policy, engine in engines.items():
            engine.load_state(str(Path(engine.log_dir) / "checkpoints" / f"step-{step}" / policy))  # type: ignore[attr-defined]
            self._trained.add(policy or None)  # the loaded weights are served from the first step
        return step


def teacher_sampler(folder: str | Path, student: TrainingEngine) -> Any:
    """A frozen teacher model (a model folder) as a sampler that scores token ids; it must read the student's token
    ids as the student does: the same tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lightning_otel.serving.sampler_api import HFChatTokenizer
    from lightning_otel.training.tinker.local_engine import LocalSampler

    path = Path(folder)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"the teacher {folder} is not a model folder (no config.json)")
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.get_vocab() != student.chat_tokenizer.tokenizer.get_vocab():  # type: ignore[attr-defined]
        raise ValueError(f"the teacher {folder} has another tokenizer than the student: it cannot score the "
                         "student's token ids")  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(str(path))
    return LocalSampler(model, HFChatTokenizer(tokenizer), version=0)


def _saved_steps(log_dir: Any, policy: str) -> list[int]:
    """The steps whose state (a policy's: its folder in the step's) is whole under `log_dir/checkpoints` (a save the
    trainer was killed in is not one)."""
    if log_dir is None:
        return []
    return [
        int(match[1])
        for path in (Path(log_dir) / "checkpoints").glob("step-*")
        if (match := re.fullmatch(r"step-(\d+)", path.name)) and state_complete(path / policy)
    ]


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
