"""`TrainingLoop`: the step every backend trains under.

    loop = TrainingLoop(backend, schedule=Schedule(batch_size=8, group_size=4, val_every=5),
                        estimator=GroupAdvantage(), sampling={"temperature": 1.0, "max_tokens": 256})
    result = loop.run(run, train_tasks, val_tasks)      # run: the Trainer's TrainingRun

The loop serves the policy (a policy gateway in front of the backend's replicas, published as the agents'
`policy_resource`; every response names the policy version that sampled it), and each step:
1. queues the step's tasks `group_size` times (one group per task) and collects the complete rollouts (spans read in
   one call, adapted by the trainer's `agent_match`); the gateway then refuses calls (503 + Retry-After) until the
   next weights are served;
2. turns them into samples (`samples_from`) and lets the estimator give each its advantage (or weight);
3. trains (`backend.update`) only if some sample can move the policy; otherwise the step is skipped and the
   progress line says why (every group's rewards equal, no sample selected, every rollout failed, ...);
4. publishes the weights (`backend.publish`: the policy version the next step samples);
5. validates (before the first step, every `val_every`, after the last), saves (every `save_every`, after the last),
   logs one metric table (`metrics.LOOP_METRICS` + the backend's own) to the trackers and calls `on_step`.
A run in which no step trained raises `NothingTrained` with the first skipped step's reasons.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lightning_otel.runtime.algorithm import Algorithm, BatchResult, TrainingRun
from lightning_otel.runtime.resources import ProxyLLM
from lightning_otel.runtime.sample_diagnosis import NothingTrained, why_no_samples
from lightning_otel.training.loop.advantages import AdvantageEstimator, moves_policy
from lightning_otel.training.loop.backend import Backend, NothingToUpdate, PolicyReplicas
from lightning_otel.training.loop.metrics import MetricsLog
from lightning_otel.training.loop.samples import Sample, message_samples, samples_from
from lightning_otel.training.loop.schedule import Schedule

log = logging.getLogger("lightning_otel.training")


@dataclass(slots=True)
class StepRecord:
    step: int
    metrics: dict[str, float]
    sample_response_ids: list[str] = field(default_factory=list)  # the LLM calls that became samples
    sample_agents: dict[str, int] = field(default_factory=dict)  # samples per agent name
    rollout_ids: list[str] = field(default_factory=list)  # the step's rollouts (their traces are in the collector)
    skipped_because: list[str] = field(default_factory=list)  # why the step trained nothing (empty: it trained)
    rewards: dict[str, float] = field(default_factory=dict)  # final reward of each rewarded rollout


@dataclass(slots=True)
class LoopResult:
    steps: list[StepRecord] = field(default_factory=list)
    validations: list[StepRecord] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    train_seconds: float = 0.0
    final: dict[str, float] = field(default_factory=dict)  # what the backend reported after the last step

    def rewards(self) -> list[float]:
        """Mean training reward per step (NaN where a step had none)."""
        return [record.metrics.get("rollout/reward_mean", math.nan) for record in self.steps]


class TrainingLoop(Algorithm):
    """See the module docstring. An `Algorithm`: `Trainer(algorithm=TrainingLoop(MyBackend(), ...))` trains with a
    backend of your own. `sampling`/`validation_sampling`: what the gateway enforces on every policy call
    (temperature, top_p, max_tokens) while training / validating; `group_by_agent`: groups per task and agent;
    `rollout_timeout_s`: a step's rollouts still running then are cancelled; `gateway_host`/`gateway_port`: where the
    gateway listens ("0.0.0.0" for runners on other machines)."""

    shows_progress: ClassVar[bool] = True  # the loop's step bar (trackers' console)

    def __init__(
        self,
        backend: Backend,
        *,
        schedule: Schedule,
        estimator: AdvantageEstimator,
        sampling: Mapping[str, Any] | None = None,
        validation_sampling: Mapping[str, Any] | None = None,
        group_by_agent: bool = False,
        trackers: MetricsLog | None = None,
        on_step: Callable[[int, dict[str, float]], None] | None = None,
        policy_resource: str = "main_llm",
        rollout_timeout_s: float | None = None,
        gateway_host: str = "127.0.0.1",
        gateway_port: int = 0,
    ) -> None:
        self.backend, self.schedule, self.estimator = backend, schedule, estimator
        self.sampling = dict(sampling or {})
        self.validation_sampling = dict(validation_sampling if validation_sampling is not None else self.sampling)
        self.group_by_agent = group_by_agent
        # one console line (a progress bar on a terminal) a step unless trackers are given
        console_only = MetricsLog(("console",), project="", experiment="", log_dir=None)
        self.trackers: MetricsLog = trackers if trackers is not None else console_only
        self.on_step = on_step
        self.policy_resource = policy_resource
        self.rollout_timeout_s = rollout_timeout_s
        self.gateway_host, self.gateway_port = gateway_host, gateway_port
        self._gateway: Any = None

    # --- the run -------------------------------------------------------------------------------------------------
    def run(
        self, run: TrainingRun, train_tasks: Sequence[Any] | None, val_tasks: Sequence[Any] | None = None
    ) -> LoopResult:
        train_tasks = list(train_tasks or [])
        steps = self.schedule.steps(train_tasks)
        val_tasks = list(val_tasks or [])
        result = LoopResult()
        if (settings := self.estimator.describe()) is not None:
            run.estimator_settings = {**settings, "group_by_agent": self.group_by_agent}
        started = time.monotonic()
        with contextlib.ExitStack() as stack:
            stack.callback(self.trackers.close)
            replicas = stack.enter_context(self.backend.serving())
            if replicas is not None:
                self._gateway = stack.enter_context(self._served(run, replicas))
            resumed = self.backend.load()
            if resumed:
                log.info("resuming after step %d (the backend's latest checkpoint)", resumed)
            self.trackers.start(len(steps), resumed)
            self._publish(run, resumed)
            if val_tasks and self.schedule.val_at_start:
                self._record_validation(result, resumed, run, val_tasks)
            for step in range(resumed + 1, len(steps) + 1):
                record = self._step(run, step, steps[step - 1], len(train_tasks))
                if val_tasks and self.schedule.validates_after(step, len(steps)):
                    record.metrics.update(self._record_validation(result, step, run, val_tasks, log_it=False))
                if self.schedule.saves_after(step, len(steps)) and (path := self.backend.save(step)):
                    result.checkpoints.append(path)
                result.steps.append(record)
                self.trackers.log(step, record.metrics, note=_note(record))
                if self.on_step is not None:
                    self.on_step(step, record.metrics)
            result.final = self.backend.finish()
        result.train_seconds = time.monotonic() - started
        if result.steps and all(record.skipped_because for record in result.steps):
            raise NothingTrained(nothing_trained_summary(result.steps))
        return result

    # --- one step ------------------------------------------------------------------------------------------------
    def _step(self, run: TrainingRun, step: int, tasks: list[Any], task_count: int) -> StepRecord:
        began = time.monotonic()
        version = run.policy_version
        batch = self._rollouts(run, tasks, mode="train", n=self.schedule.group_size)
        self.backend.pause_serving()
        generated = time.monotonic()
        if self.backend.learns_from_text:
            match = self.backend.agent_match if self.backend.agent_match is not None else run.adapter.agent_match
            samples, metrics = message_samples(batch, match, group_by_agent=self.group_by_agent)
        else:
            samples, metrics = samples_from(batch, group_by_agent=self.group_by_agent)
        rewards = {rollout: reward for rollout, reward in batch.rewards().items() if reward is not None}
        metrics.update(self.estimator.assign(samples, rewards))
        record = StepRecord(step, metrics, rollout_ids=list(batch.batch.rollout_ids), rewards=rewards)
        for sample in samples:
            if sample.triplet is not None:
                record.sample_response_ids.extend(sample.triplet.response_ids)
                name = sample.triplet.agent_name or ""
                record.sample_agents[name] = record.sample_agents.get(name, 0) + 1
        metrics["training/samples"] = float(len(samples))
        metrics["timing_s/gen"] = generated - began
        update_s = 0.0
        metrics.update(self.backend.idle_metrics())  # replaced by the update's own when it runs
        if samples and moves_policy(samples, self.estimator.learns_from):
            began_update = time.monotonic()
            try:
                metrics.update(self.backend.update(samples, step))
            except NothingToUpdate as nothing:
                metrics.update(nothing.metrics)
                record.skipped_because = nothing.reasons
            update_s = time.monotonic() - began_update
        else:
            record.skipped_because = self._why_skipped(run, batch, samples)
        metrics["training/skipped_step"] = 1.0 if record.skipped_because else 0.0
        if record.skipped_because:
            log.warning("step %d trained nothing: %s", step, "; ".join(record.skipped_because))
        began_publish = time.monotonic()
        self._publish(run, step)
        metrics.update({
            "timing_s/update": update_s,
            "timing_s/publish": time.monotonic() - began_publish,
            "timing_s/step": time.monotonic() - began,
            "training/policy_version": float(version) if version is not None else math.nan,
            "training/global_step": float(step),
            "training/epoch": float(self.schedule.epoch_of(step, task_count)),
        })  # fmt: skip
        return record

    def _why_skipped(self, run: TrainingRun, batch: BatchResult, samples: list[Sample]) -> list[str]:
        if samples:
            return [self.estimator.nothing_to_learn(samples)]
        reasons = why_no_samples([batch], run.adapter.agent_match, late_spans=run.late_spans)
        return reasons or ["no sample was selected"]

    def _rollouts(self, run: TrainingRun, tasks: Sequence[Any], *, mode: str, n: int) -> BatchResult:
        gateway = self._gateway
        if gateway is not None:
            gateway.set_mode(mode)
            gateway.resume()
        try:
            return run.collect(run.submit(tasks, n=n, mode=mode), timeout=self.rollout_timeout_s)
        finally:
            if gateway is not None:
                gateway.pause()  # late calls get 503 + Retry-After until the next weights are served

    def _publish(self, run: TrainingRun, step: int) -> None:
        version = self.backend.publish(step)
        if version is not None:
            run.policy_version = version  # rollouts queued from now on carry it

    # --- validation ----------------------------------------------------------------------------------------------
    def _record_validation(
        self, result: LoopResult, step: int, run: TrainingRun, tasks: list[Any], *, log_it: bool = True
    ) -> dict[str, float]:
        began = time.monotonic()
        batch = self._rollouts(run, tasks, mode="val", n=self.schedule.val_group_size)
        _, raw = samples_from(batch)
        metrics = {"val/" + key.removeprefix("rollout/"): value for key, value in raw.items() if "/" in key}
        metrics["timing_s/validation"] = time.monotonic() - began
        if math.isnan(metrics.get("val/reward_mean", math.nan)):
            log.warning("validation at step %d: no rollout succeeded with a reward (%s)", step, batch.metrics())
        result.validations.append(StepRecord(step, metrics, rollout_ids=list(batch.batch.rollout_ids)))
        if log_it:
            self.trackers.log(step, metrics)
        return metrics

    # --- serving -------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _served(self, run: TrainingRun, replicas: PolicyReplicas) -> Iterator[Any]:
        """The policy gateway over the replicas, published as the policy resource; its spans go to the collector."""
        from lightning_otel.serving.gateway import advertised_url, gateway_for_run

        served = gateway_for_run(
            run, replicas.urls, sampling=self.sampling, validation_sampling=self.validation_sampling,
            model=replicas.model, host=self.gateway_host, port=self.gateway_port,
            paused=True,  # until the first publish: the replicas get the trained weights first
        )  # fmt: skip
        with served as (gateway, server):
            # ProxyLLM: get_base_url(rollout_id, attempt_id) puts the rollout in the path (bare clients)
            url = advertised_url(server.host, server.port)
            policy = ProxyLLM(url, replicas.model, sampling_parameters=self.sampling)
            run.update_resources({**run.latest_resources(), self.policy_resource: policy})
            log.info("policy gateway %s over %s (%s)", server.base_url, replicas.urls, self.backend.name)
            yield gateway


def _note(record: StepRecord) -> str:
    return ("skipped: " + "; ".join(record.skipped_because)) if record.skipped_because else ""


def nothing_trained_summary(steps: Sequence[StepRecord]) -> str:
    """One message for a run in which no step trained: what the steps saw, and the first step's reasons."""

    def total(key: str) -> int:
        return int(sum(record.metrics.get(key, 0.0) for record in steps))

    first = steps[0]
    failed = total("rollout/failed") + total("rollout/timeout") + total("rollout/cancelled")
    return (
        f"no training step of {len(steps)} had a trainable sample (none trained: {total('rollout/rollouts')} "
        f"rollouts ({failed} failed), {total('training/samples')} samples selected, "
        f"{total('rollout/zero_variance_groups')} groups whose rewards were all equal, "
        f"{total('rollout/calls_without_token_ids')} calls without token ids). Step {first.step}: "
        + "; ".join(first.skipped_because)
        + ". Check agent_match with Trainer.dev, and a reward that varies between attempts of a task"
    )
