"""`TrainingLoop`: the step every backend trains under.

    options = TrainingOptions(schedule=Schedule(batch_size=8, group_size=4, val_every=5),
                              sampling=Sampling(temperature=1.0, max_tokens=256))
    loop = TrainingLoop(MyBackend(), options)
    result = loop.run(run, train_tasks, val_tasks)      # run: the Trainer's TrainingRun -> TrainingResult

The loop serves the policy (a policy gateway in front of the backend's replicas, published as the agents'
`policy_resource`; every response names the policy version that sampled it), and each step:
1. queues the step's tasks `group_size` times (one group per task) and collects the complete rollouts (spans read in
   one call, adapted by the trainer's `agent_match`); the gateway then refuses calls (503 + Retry-After) until the
   next weights are served;
2. turns them into samples (`samples_from`), lets the estimator give each its advantage (or weight) and a teacher
   its per-token signal (`distillation`; checked before the first step: `teacher_check`); 3. trains
   (`backend.update`) only if some sample can move the policy, else says why (every group's rewards equal, ...);
4. publishes the weights as policy version `step` (`backend.publish`; version 0 is the first weights served);
5. validates (before the first step, every `val_every`, after the last), saves (every `save_every`, after the last),
   logs one metric table (`metrics.LOOP_METRICS` + the backend's own) to the trackers and calls `on_step`.
A run in which no step trained raises `NothingTrained` with the first skipped step's reasons.

A policy per agent (`agent_match` a mapping, `adapters.policy_match`; backends with `policy_per_agent`): each policy
trains on its agents' samples and serves their calls; each step logs `policy/<name>/*` (its samples' count, mean
reward and |advantage|, the backend's own). An agent two policies' patterns match stops the run, in one line.

Asynchronous (`max_staleness=k`, k >= 1; backends that serve while they update): the runners never wait for the
update. The tasks of the next k steps stay queued ahead; a step trains on the first `batch_size` complete groups
whose oldest call was sampled at most k policy versions before the one being trained (`staleness.AsyncRollouts`:
older groups are dropped, counted and run again; unfinished ones carry over); the gateway keeps serving while the
backend updates and holds new requests only while the weights change (drained: requests in flight finish on the old
weights; no response mixes weights, each names its version), not at all for a backend whose swap is atomic per
request (`Backend.atomic_weight_swap`). `async/*` metrics say what happened.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from lightning_otel.agent_api.resources import ProxyLLM
from lightning_otel.runtime.algorithm import Algorithm
from lightning_otel.runtime.rollout_batch import BatchResult
from lightning_otel.runtime.sample_diagnosis import why_no_samples
from lightning_otel.runtime.training_run import TrainingRun
from lightning_otel.training.loop.advantages import moves_policy
from lightning_otel.training.loop.backend import Backend, NothingToUpdate, PolicyReplicas
from lightning_otel.training.loop.distillation import Teacher
from lightning_otel.training.loop.metrics import MetricsLog
from lightning_otel.training.loop.options import Trackers, TrainingOptions
from lightning_otel.training.loop.refill import TaskPool, refill
from lightning_otel.training.loop.result import StepRecord, TrainingResult
from lightning_otel.training.loop.samples import Sample, message_samples, samples_from, trained_samples
from lightning_otel.training.loop.schedule import Schedule
from lightning_otel.training.loop.staleness import AsyncRollouts, RunnerUsage, Taken, require_async_support
from lightning_otel.training.loop.step_spans import step_spans
from lightning_otel.training.loop.step_summary import (
    TimeBudget,
    async_metrics,
    policy_metrics,
    refuse_nothing_trained,
    say_agents_trained,
    staleness_histogram,
    step_note,
    task_means,
)
from lightning_otel.training.loop.teacher_check import TEACHER_NOTE, check_teacher, require_val_tasks, rollout_contexts

if TYPE_CHECKING:
    from lightning_otel.serving.gateway import PolicyGateway

log = logging.getLogger("lightning_otel.training")


class TrainingLoop(Algorithm):
    """See the module docstring. An `Algorithm`: `Trainer(algorithm=TrainingLoop(MyBackend(), options))` trains
    with a backend of your own. `options`: the loop's settings (`TrainingOptions`; the schedule's default is
    `Schedule()`); `run_config`: the run's configuration as the trackers record it (wandb's config)."""

    shows_progress: ClassVar[bool] = True  # the loop's step bar (trackers' console)

    def __init__(
        self, backend: Backend, options: TrainingOptions | None = None, *, run_config: Mapping[str, Any] | None = None
    ) -> None:
        self.options = options = options or TrainingOptions()
        require_async_support(options.max_staleness, backend.name, backend.serves_while_updating,
                              backend.why_not_async)  # fmt: skip
        self.backend = backend
        self.schedule: Schedule = options.schedule or Schedule()
        self.estimator = backend.estimator(options.advantage)
        self.sampling = options.sampling.params() if options.sampling is not None else {}
        validation = options.validation_sampling
        self.validation_sampling = validation.params() if validation is not None else dict(self.sampling)
        self.run_config = dict(run_config or {})
        self.policy_per_agent = backend.policy_per_agent  # the Trainer refuses a mapping of policies otherwise
        self._policies: list[str] = []
        self._gateway: PolicyGateway | None = None
        self._version = 0  # the policy version the replicas serve: the loop's count (see `backend`)
        self._settings = options.rollout_settings(self.estimator)  # what every rollout of the run records
        self._agents_said = False  # which agents are trained without agent_match: said at the first step with samples
        self._pool: TaskPool | None = None  # refilled groups' tasks (`refill_tied_groups`)
        self._refilled: dict[str, float] = {}  # the step's refill metrics
        self._teacher = Teacher.of(backend, options.distillation, self.sampling)  # on-policy distillation's

    # --- the run -------------------------------------------------------------------------------------------------
    def run(
        self, run: TrainingRun, train_tasks: Sequence[Any] | None, val_tasks: Sequence[Any] | None = None
    ) -> TrainingResult:
        train_tasks = list(train_tasks or [])
        steps = self.schedule.steps(train_tasks)
        if self.options.refill_tied_groups:
            self._pool = TaskPool(train_tasks, seed=self.schedule.seed)
        val_tasks = list(val_tasks or [])
        require_val_tasks(self.options.distillation, val_tasks, self.schedule.val_at_start)
        result = TrainingResult()
        trackers = self._trackers(run)
        started = time.monotonic()
        policies = getattr(run.adapter, "policies", None)
        if policies is not None:
            self.backend.use_policies(policies.policies)
            self._policies = policies.policies
        with contextlib.ExitStack() as stack:
            stack.callback(trackers.close)
            replicas = stack.enter_context(self.backend.serving())
            if replicas is not None:
                self._gateway = stack.enter_context(self._served(run, replicas))
            resumed = self.backend.load()
            if resumed:
                log.info("resuming after step %d (the backend's latest checkpoint)", resumed)
            trackers.start(len(steps), resumed)
            self._publish(resumed)
            pipeline = self._pipeline(run, stack)
            record_span = stack.enter_context(step_spans(run))  # each step's metrics, in the collector too
            if val_tasks and self.schedule.val_at_start:
                metrics = self._record_validation(result, resumed, run, val_tasks)  # logged with the check's line
                check_teacher(functools.partial(self._validate, [], 0, run, val_tasks), self.options.distillation,
                              metrics, functools.partial(trackers.log, resumed, metrics), resumed=resumed,
                              n=self.schedule.val_sampled or 1)  # fmt: skip
            last = len(steps)
            budget = TimeBudget(self.schedule.max_seconds)
            for step in range(resumed + 1, len(steps) + 1):
                if step > last:
                    break
                step_began_ns = time.time_ns()
                rollouts = (
                    functools.partial(self._synchronous, run, steps[step - 1])
                    if pipeline is None
                    else functools.partial(self._asynchronous, run, pipeline, steps, step)
                )
                record = self._step(run, step, rollouts, len(train_tasks))
                stopped = step < last and not budget.allows_another(record.metrics["timing_s/step"])
                if stopped:
                    last = step  # this step is the last: it validates and saves as the last one does
                    log.warning("time budget: %s; step %d of %d is the last", budget.said(), step, len(steps))
                record.metrics["training/stopped_by_time_budget"] = float(stopped)
                if val_tasks and self.schedule.validates_after(step, last):
                    record.metrics.update(self._record_validation(result, step, run, val_tasks))
                # the step's record before its checkpoint: a trainer killed between them redoes the step on resume
                # (its record written again) rather than leaving a checkpointed step unrecorded
                result.steps.append(record)
                record_span(step, record.metrics, step_began_ns, record.trained, getattr(self._teacher, "taught", ()))
                trackers.log(step, record.metrics, note=step_note(record))
                if self.schedule.saves_after(step, last) and (path := self.backend.save(step)):
                    result.checkpoints.append(path)
                if self.options.on_step is not None:
                    self.options.on_step(step, record.metrics)
            result.final = self.backend.finish()
        result.train_seconds = time.monotonic() - started
        refuse_nothing_trained(result.steps, resumed)
        return result

    # --- one step ------------------------------------------------------------------------------------------------
    def _synchronous(self, run: TrainingRun, tasks: list[Any]) -> tuple[BatchResult, Taken | None]:
        batch = self._rollouts(run, tasks, mode="train", n=self.schedule.group_size)
        if self._pool is not None:  # tied groups replaced by further tasks' (`refill`), before the replicas pause
            more = functools.partial(self._rollouts, run, mode="train", n=self.schedule.group_size, same_step=True)
            batch, self._refilled = refill(batch, tasks, self._pool, self.options.refill_tied_groups, more)
        self.backend.pause_serving()
        return batch, None

    def _asynchronous(
        self, run: TrainingRun, pipeline: AsyncRollouts, steps: list[list[Any]], step: int
    ) -> tuple[BatchResult, Taken]:
        for ahead in range(step, min(step + self.options.max_staleness, len(steps)) + 1):
            if ahead not in self._queued_steps:  # the next k steps' tasks run while this one trains
                pipeline.queue(steps[ahead - 1])
                self._queued_steps.add(ahead)
        taken = pipeline.take(len(steps[step - 1]), self._version)
        return taken.result, taken

    def _pipeline(self, run: TrainingRun, stack: contextlib.ExitStack) -> AsyncRollouts | None:
        """Asynchronous training's rollouts (None: synchronous steps); the gateway stays open from here on. The
        runners' usage is sampled in both modes (`rollout/runner_idle_share`)."""
        capacity = self.schedule.batch_size * self.schedule.group_size
        slots = run.settings.runner_slots
        self._usage = RunnerUsage(run.client, min(capacity, slots) if slots else capacity).start()
        stack.callback(self._usage.stop)
        self._queued_steps: set[int] = set()
        if not self.options.max_staleness:
            return None
        pipeline = AsyncRollouts(run, group_size=self.schedule.group_size, max_staleness=self.options.max_staleness,
                                 stamp=self._stamp, collect_timeout_s=self.options.collect_timeout_s)  # fmt: skip
        stack.callback(pipeline.cancel_rest)
        if self._gateway is not None:
            self._gateway.set_mode("train")
            self._gateway.resume()
        return pipeline

    def _step(
        self, run: TrainingRun, step: int, rollouts: Callable[[], tuple[BatchResult, Taken | None]], task_count: int
    ) -> StepRecord:
        began = time.monotonic()
        version = self._version
        self._refilled = {}
        batch, taken = rollouts()
        generated = time.monotonic()
        match = self.backend.agent_match if self.backend.agent_match is not None else run.adapter.agent_match
        if self.backend.learns_from_text:
            samples, metrics = message_samples(batch, match, group_by_agent=self.options.group_by_agent)
        else:
            samples, metrics = samples_from(batch, group_by_agent=self.options.group_by_agent)
        if taken is not None:
            metrics.update(async_metrics(taken))
            for sample in samples:
                sample.staleness = taken.staleness.get(sample.rollout, 0)
            metrics.update(staleness_histogram(samples))
        metrics.update(self._refilled)
        rewards = {rollout: reward for rollout, reward in batch.rewards().items() if reward is not None}
        metrics.update(self.estimator.assign(samples, rewards))
        if self._teacher is not None:
            metrics.update(self._teacher.teach(samples, batch.tasks()))
        if self._policies:
            self._refuse_policy_conflicts(batch)
            metrics.update(policy_metrics(self._policies, samples))
        record = StepRecord(step, metrics, rollout_ids=list(batch.batch.rollout_ids), rewards=rewards)
        for sample in samples:
            if sample.triplet is not None:
                record.sample_response_ids.extend(sample.triplet.response_ids)
                name = sample.triplet.agent_name or ""
                record.sample_agents[name] = record.sample_agents.get(name, 0) + 1
        metrics["training/samples"] = float(len(samples))
        metrics["timing_s/gen"] = generated - began
        self._agents_said = self._agents_said or say_agents_trained(match, record)  # said once
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
            if not record.skipped_because:
                record.trained = trained_samples(samples, metrics)
        else:
            record.skipped_because = self._why_skipped(run, batch, samples)
        metrics["training/skipped_step"] = 1.0 if record.skipped_because else 0.0
        if record.skipped_because:
            log.warning("step %d trained nothing: %s", step, "; ".join(record.skipped_because))
        began_publish = time.monotonic()
        self.backend.prepare_publish(step)  # the slow part, while the replicas serve
        if taken is not None and self._gateway is not None and not self.backend.atomic_weight_swap:
            pause_before = self._gateway.pause_s_total
            with self._gateway.held() as in_flight:  # new requests wait; those in flight finish on the old weights
                self._publish(step)
            metrics["async/gateway_pause_s"] = self._gateway.pause_s_total - pause_before
            metrics["async/in_flight_at_pause"] = float(in_flight)
        else:
            self._publish(step)
        metrics["rollout/runner_idle_share"] = self._usage.lap()
        metrics.update({
            "timing_s/update": update_s,
            "timing_s/publish": time.monotonic() - began_publish,
            "timing_s/step": time.monotonic() - began,
            "training/policy_version": float(version),
            "training/global_step": float(step),
            "training/epoch": float(self.schedule.epoch_of(step, task_count)),
        })  # fmt: skip
        return record

    def _refuse_policy_conflicts(self, batch: BatchResult) -> None:
        """An agent matched by two policies' patterns (seen by the gateway, or in the spans) stops the run: no one
        can tell which policy should have sampled its calls."""
        conflicts = list(self._gateway.policy_conflicts) if self._gateway is not None else []
        conflicts += [c for adapted in batch.adapted.values() for c in adapted.diagnostics.policy_conflicts]
        if conflicts:
            raise ValueError(conflicts[0])

    def _why_skipped(self, run: TrainingRun, batch: BatchResult, samples: list[Sample]) -> list[str]:
        if samples:
            return [self.estimator.nothing_to_learn(samples)]
        reasons = why_no_samples([batch], run.adapter.agent_match, late_spans=run.late_spans)
        return reasons or ["no sample was selected"]

    def _rollouts(
        self, run: TrainingRun, tasks: Sequence[Any], *, mode: str, n: int, sampling: str | None = None,
        same_step: bool = False, context_of: Callable[[Any], str] | None = None,
    ) -> BatchResult:  # fmt: skip
        """The tasks run `n` times each as `mode` rollouts; the gateway samples them as `sampling` says ("train" or
        "val"; default: as their mode); `same_step`: more of the last step's (a refill); `context_of(task)`: a system
        message the gateway puts before each of their chat calls (the teacher check's)."""
        gateway = self._gateway
        timeout = self.options.collect_timeout_s
        sampling = sampling or mode
        contexts: dict[str, str] = {}
        if self.options.max_staleness and gateway is not None:  # training rollouts run beside: sampling per rollout
            with gateway.held() if context_of else contextlib.nullcontext():  # no call of theirs before its context
                batch = run.submit(tasks, n=n, mode=mode, metadata=self._stamp(bool(context_of)))
                gateway.put_context(contexts := rollout_contexts(batch, context_of))
                if sampling == "val":
                    gateway.validate_rollouts(batch.rollout_ids)
            try:
                return run.collect(batch, timeout=timeout)
            finally:
                gateway.validate_rollouts(batch.rollout_ids, done=True)
                gateway.put_context(contexts, done=True)
        if gateway is not None:
            gateway.set_mode(sampling)
            if context_of is None:
                gateway.resume()
        try:
            queued = run.submit(tasks, n=n, mode=mode, metadata=self._stamp(bool(context_of)), same_step=same_step)
            if gateway is not None and context_of is not None:  # resumed once their contexts are put
                gateway.put_context(contexts := rollout_contexts(queued, context_of))
                gateway.resume()
            return run.collect(queued, timeout=timeout)
        finally:
            if gateway is not None:
                gateway.pause()  # late calls get 503 + Retry-After until the next weights are served
                gateway.put_context(contexts, done=True)

    def _publish(self, version: int) -> None:
        """Serve the weights as `version`; rollouts queued from now on record it."""
        self.backend.publish(version)
        self._version = version

    def _stamp(self, teacher_check: bool = False) -> dict[str, Any]:
        """What each rollout queued now records of the training: its settings, the policy version serving (a label)."""
        note = {"note": TEACHER_NOTE} if teacher_check else {}  # the rollout view labels the teacher check's batch
        return {"training": self._settings, "policy_version": self._version, **note}

    def _trackers(self, run: TrainingRun) -> MetricsLog:
        trackers = self.options.trackers or Trackers()
        return MetricsLog(
            trackers.logger, project=trackers.project, experiment=trackers.experiment or run.run_id,
            log_dir=trackers.log_dir, config=self.run_config,
        )  # fmt: skip

    # --- validation ----------------------------------------------------------------------------------------------
    def _record_validation(
        self, result: TrainingResult, step: int, run: TrainingRun, tasks: list[Any]
    ) -> dict[str, float]:
        """The validation after `step` (0: before the first): at the validation sampling (`val/`), and with
        `val_sampled` at the training sampling too (`val_sampled/`)."""
        metrics = self._validate(result.validations, step, run, tasks, "val", self.schedule.val_group_size,
                                 sampling="val")  # fmt: skip
        if self.schedule.val_sampled:
            metrics.update(self._validate(result.sampled_validations, step, run, tasks, "val_sampled",
                                          self.schedule.val_sampled))  # fmt: skip
        return metrics

    def _validate(
        self, records: list[StepRecord], step: int, run: TrainingRun, tasks: list[Any], prefix: str, n: int,
        context_of: Callable[[Any], str] | None = None, *, sampling: str = "train",
    ) -> dict[str, float]:  # fmt: skip
        began = time.monotonic()
        batch = self._rollouts(run, tasks, mode="val", n=n, sampling=sampling, context_of=context_of)
        _, raw = samples_from(batch)
        metrics = {f"{prefix}/" + key.removeprefix("rollout/"): value for key, value in raw.items() if "/" in key}
        metrics[f"timing_s/{'validation' if prefix == 'val' else prefix}"] = time.monotonic() - began
        if math.isnan(metrics.get(f"{prefix}/reward_mean", math.nan)):
            log.warning("validation at step %d: no rollout succeeded with a reward (%s)", step, batch.metrics())
        rewards = {rollout: float(reward) for rollout, reward in batch.rewards().items() if reward is not None}
        records.append(StepRecord(step, metrics, rollout_ids=list(batch.batch.rollout_ids), rewards=rewards,
                                  task_rewards=task_means(batch, rewards)))  # fmt: skip
        return metrics

    # --- serving -------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _served(self, run: TrainingRun, replicas: PolicyReplicas) -> Iterator[PolicyGateway]:
        """The policy gateway over the replicas, published as the policy resource; its spans go to the collector."""
        from lightning_otel.serving.gateway_run import advertised_url, gateway_for_run

        served = gateway_for_run(
            run, replicas.urls, sampling=self.sampling, validation_sampling=self.validation_sampling,
            model=replicas.model, host=self.options.gateway_host, port=self.options.gateway_port,
            paused=True,  # until the first publish: the replicas get the trained weights first
            policies=getattr(run.adapter, "policies", None) if replicas.policies else None,
        )  # fmt: skip
        with served as (gateway, server):
            # ProxyLLM: get_base_url(rollout_id, attempt_id) puts the rollout in the path (bare clients)
            url = advertised_url(server.host, server.port)
            policy = ProxyLLM(url, replicas.model, sampling_parameters=self.sampling)
            run.update_resources({**run.latest_resources(), self.options.policy_resource: policy})
            log.info("policy gateway %s over %s (%s)", server.base_url, replicas.urls, self.backend.name)
            yield gateway
