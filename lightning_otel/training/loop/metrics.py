"""The loop's metric names (one table, every backend) and the trackers they go to.

Every step logs the loop's metrics below, then the backend's own under its prefix (VERL: `actor/`, `critic/`,
`batch/`, `perf/`, verl's `timing_s/` stages; Tinker: `train/`; SFT: `sft/`). Validation logs `val/` + the `rollout/`
names (`val/reward_mean`, `val/succeeded`, ...), and with `Schedule.val_sampled` the same at the training sampling
under `val_sampled/`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# name -> meaning. The README's training page shows this table.
LOOP_METRICS: dict[str, str] = {
    "rollout/reward_mean": "mean final reward of the step's succeeded rollouts",
    "rollout/rollouts": "rollouts queued (tasks x group size)",
    "rollout/succeeded": "rollouts that succeeded",
    "rollout/failed": "rollouts that failed after their attempts",
    "rollout/timeout": "rollouts that timed out",
    "rollout/cancelled": "rollouts cancelled (the step's rollout timeout passed)",
    "rollout/unfinished": "rollouts not final when the step read them",
    "rollout/retried": "rollouts that took more than one attempt",
    "rollout/failed_infrastructure": "rollouts failed for the infrastructure past their attempts (never trained)",
    "rollout/policy_failures": "rollouts the policy's output broke or a limit stopped (trained with their reward)",
    "rollout/failed_agent_error": "rollouts failed by the agent's own error, no rule naming it (not trained)",
    "rollout/triplets": "LLM calls agent_match selected, with token ids",
    "rollout/rollouts_without_triplets": "succeeded rollouts that gave no sample",
    "rollout/calls_without_token_ids": "selected calls whose server returned no token ids",
    "rollout/merge_breaks": "trajectory mode: calls that did not extend the previous prompt",
    "rollout/duplicate_calls": "calls recorded twice (client and gateway), kept once",
    "rollout/harness_copies": "a harness's own spans of calls the gateway recorded (they name the calls' agents)",
    "rollout/incomplete_rollouts": "rollouts read with spans still missing after span_wait_s",
    "rollout/gateway_calls": "calls the policy gateway served for the step's rollouts",
    "rollout/with_samples": "rollouts with a reward and at least one sample",
    "rollout/without_reward": "succeeded rollouts without a reward",
    "rollout/triplets_per_rollout": "samples per rollout with samples",
    "rollout/groups": "groups (tasks, per agent with group_by_agent) with samples",
    "rollout/zero_variance_groups": "groups whose rollouts all got the same reward (no GRPO signal)",
    "rollout/runners": "runners that ran the step's rollouts",
    "rollout/runner_idle_share": "1 - mean rollouts running / min(runner slots, a step's rollouts), over the step",
    "rollout/calls_without_content": "text backends (SFT): selected calls without message content",
    "training/samples": "samples the estimator saw",
    "training/samples_with_advantage": "samples with a non-zero advantage (policy-gradient losses)",
    "training/samples_with_weight": "samples with a non-zero weight (supervised losses)",
    "training/rollouts_kept": "rollouts that reached min_reward (SFT)",
    "training/advantage_abs_mean": "mean |advantage| over the samples",
    "training/skipped_step": "1: nothing could move the policy, no update ran (the progress line says why)",
    "training/stopped_by_time_budget": "1: the schedule's max_seconds ends the run after this step (it validates)",
    "training/policy_version": "the version trained, which sampled the step's rollouts (asynchronous: the newest)",
    "training/global_step": "the step (from 1)",
    "training/epoch": "the epoch (from 0)",
    "timing_s/gen": "seconds from queueing the step's rollouts to having their samples",
    "timing_s/gen_wait": "of which: until every rollout was final",
    "timing_s/gen_read_adapt": "of which: reading the spans in one call and adapting them",
    "timing_s/update": "the backend's update (skipped steps: 0)",
    "timing_s/publish": "making the new weights servable (weight sync, sampler swap)",
    "timing_s/step": "the whole step (validation and checkpoints excluded)",
}
# Only with refilled groups (`refill_tied_groups` > 0).
REFILL_METRICS: dict[str, str] = {
    "refill/tasks_drawn": "tasks drawn beyond the step's own to make up for groups whose rewards tied",
    "refill/groups": "the step's groups, its own tasks' and the drawn ones'",
    "refill/tied_groups": "of which: groups whose rewards all tied",
    "refill/informative_groups": "of which: groups whose rewards differ (what GRPO learns from)",
}
# Only with on-policy distillation (`TrainingOptions.distillation`).
DISTILL_METRICS: dict[str, str] = {
    "distill/samples": "samples the teacher scored",
    "distill/tokens": "sampled tokens it scored (inserted ones excluded)",
    "distill/reverse_kl": "mean student - teacher logprob over them: falls as the student learns",
    "distill/teacher_logprob": "the teacher's mean logprob of the sampled tokens",
    "timing_s/distill": "the teacher's scoring",
}
# Only with asynchronous training (`max_staleness` >= 1).
ASYNC_METRICS: dict[str, str] = {
    "async/staleness_mean": "mean versions behind the trained policy over the trained samples",
    "async/staleness_max": "the oldest trained sample's versions behind (never above max_staleness)",
    "async/staleness_K": "trained samples K versions behind (one metric per K seen: the staleness histogram)",
    "async/dropped_stale_groups": "groups dropped as older than max_staleness since the previous step (run again)",
    "async/carried_over_groups": "groups queued, running or complete and not trained: the next steps'",
    "async/wait_s": "seconds the trainer waited for complete groups (the rest ran during the previous update)",
    "async/gateway_pause_s": "seconds the gateway held new requests while the weights changed (drain + swap)",
    "async/in_flight_at_pause": "requests in flight when the hold began (finished on the old weights)",
    "async/logprob_gap_staleness_K": "mean |trainer - sampler| logprob per trained token, samples K versions behind",
}
# Only with per-call credit (`AnchorAdvantage`).
CREDIT_METRICS: dict[str, str] = {
    "credit/anchor_coverage": "share of samples in an anchor group of two or more (what the step advantage acts on)",
    "credit/anchor_groups": "anchor groups with two or more members",
    "credit/step_advantage_abs_mean": "mean |step advantage| over the samples",
    "credit/return_mean": "mean per-call return",
}
# Only where they apply: supervised estimators, text backends.
SUPERVISED_METRICS = ("training/samples_with_weight", "training/rollouts_kept", "rollout/calls_without_content")

# What the console line shows, in this order (every metric goes to the other trackers).
CONSOLE_KEYS = {
    "rollout/reward_mean": "reward",
    "val/reward_mean": "val",
    "val_sampled/reward_mean": "val sampled",
    "rollout/succeeded": "ok",
    "rollout/failed": "failed",
    "rollout/retried": "retried",
    "rollout/failed_infrastructure": "infra failed",
    "rollout/policy_failures": "policy failed",
    "rollout/runners": "runners",
    "training/samples": "samples",
    "training/samples_with_advantage": "with signal",
    "training/samples_with_weight": "with signal",
    "credit/anchor_coverage": "anchored",
    "distill/reverse_kl": "reverse KL",
    "train/datums": "datums",
    "train/tokens": "tokens",
    "train/constant_groups": "constant groups",
    "training/policy_version": "policy v",
    "async/staleness_max": "stale max",
    "async/dropped_stale_groups": "dropped stale",
    "rollout/runner_idle_share": "runners idle",
    "train/grad_norm": "grad norm",
    "timing_s/step": "step s",
}
# Said only when they happened (a line a step stays short when nothing went wrong).
CONSOLE_WHEN_NONZERO = frozenset({"rollout/retried", "rollout/failed_infrastructure", "rollout/policy_failures"})
OWN_BACKENDS = ("console", "jsonl")


def _shown(metrics: Mapping[str, float], names: Mapping[str, str]) -> str:
    return "  ".join(
        f"{name} {_short(metrics[key])}"
        for key, name in names.items()
        if key in metrics
        and not math.isnan(metrics[key])  # NaN: not this backend's (SFT has no policy version)
        and (metrics[key] or key not in CONSOLE_WHEN_NONZERO)
    )


def console_line(step: int, metrics: Mapping[str, float], note: str = "") -> str:
    return f"step {step}: {_shown(metrics, CONSOLE_KEYS)}" + (f"  ({note})" if note else "")


class StepProgress:
    """The console tracker's display: on a terminal a progress bar (step k/N, reward, samples, seconds a step,
    ETA) with a line above it for each step that was skipped or validated; elsewhere (CI logs, files) one line a
    step with the same fields and `[k/N, ETA]`."""

    def __init__(self, total: int, done: int = 0) -> None:
        from lightning_otel.runtime.output import terminal

        self.console = terminal()
        self.total, self.done = total, done
        self.started = time.monotonic()
        self._bar: Any = None
        if self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn("step"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.fields[shown]}"),
                TextColumn("ETA"), TimeRemainingColumn(), console=self.console,
            )  # fmt: skip
            self._task = self._bar.add_task("steps", total=total, completed=done, shown="")
            self._bar.start()

    def step(self, step: int, metrics: Mapping[str, float], note: str) -> None:
        self.done = max(self.done, step)
        if self._bar is None:
            print(f"{console_line(step, metrics, note)}  [{self.done}/{self.total}, ETA {self._eta()}]",
                  file=self.console.file, flush=True)  # fmt: skip
            return
        self._bar.update(self._task, completed=self.done, shown=_shown(metrics, PROGRESS_KEYS))
        if note or any(key.startswith("val/") for key in metrics):
            self._bar.console.print(console_line(step, metrics, note), highlight=False)

    def _eta(self) -> str:
        remaining = self.total - self.done
        if remaining <= 0 or not self.done:
            return "0s" if remaining <= 0 else "?"
        return f"{(time.monotonic() - self.started) / self.done * remaining:.0f}s"

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


# What the progress bar shows beside the step count.
PROGRESS_KEYS = {"rollout/reward_mean": "reward", "training/samples": "samples", "timing_s/step": "s/step"}


class MetricsLog:
    """Per-step metrics to the trackers VERL's `trainer.logger` names: "console" (one line a step) and "jsonl"
    (`log_dir`/metrics.jsonl, every metric) here; any other (wandb, tensorboard, mlflow, swanlab, file, ...)
    through verl's own `Tracking` when verl is installed."""

    def __init__(
        self,
        backends: Sequence[str],
        *,
        project: str,
        experiment: str,
        log_dir: Path | None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.experiment = experiment
        self.console = "console" in backends
        self._progress: StepProgress | None = None
        self.jsonl = (log_dir / "metrics.jsonl") if "jsonl" in backends and log_dir is not None else None
        if "jsonl" in backends and log_dir is None:
            raise ValueError("logger 'jsonl' needs a log_dir")
        others = [backend for backend in backends if backend not in OWN_BACKENDS]
        self._tracking: Any = None
        if others:
            try:
                from verl.utils.tracking import Tracking
            except ImportError as exc:
                raise ValueError(f"logger {others} needs verl's Tracking (pip install lightning-otel[verl])") from exc
            self._tracking = Tracking(project, experiment, default_backend=others, config=dict(config or {}))
        if self.jsonl is not None:
            self.jsonl.parent.mkdir(parents=True, exist_ok=True)

    def start(self, total_steps: int, done: int = 0) -> None:
        """The run's length, for the console's progress (step k of N, ETA); without it, plain lines."""
        if self.console:
            self._progress = StepProgress(total_steps, done)

    def log(self, step: int, metrics: Mapping[str, float], note: str = "") -> None:
        """`note`: a few words after the console line (why a step was skipped)."""
        if self.console and self._progress is not None:
            self._progress.step(step, metrics, note)
        elif self.console:
            from lightning_otel.runtime.output import terminal

            print(console_line(step, metrics, note), file=terminal().file, flush=True)
        if self.jsonl is not None:
            with self.jsonl.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"run": self.experiment, "step": step, **metrics}) + "\n")  # runs append
        if self._tracking is not None:
            self._tracking.log(data=dict(metrics), step=step)

    def close(self) -> None:
        """Flush and close the trackers' runs (wandb's run, tensorboard's writer, verl's file)."""
        if self._progress is not None:
            self._progress.close()
            self._progress = None
        if self._tracking is not None:
            self._tracking.finish()
            self._tracking = None


def _short(value: float) -> str:
    if math.isnan(value) or value != int(value):
        return f"{value:.3f}"
    return str(int(value))
