"""Each training step as a span in the collector: `agl.training.step` (service `agl-trainer`), its run and step
number, and every metric the step logged as an `agl.metric.<name>` attribute (async/ staleness histogram, pause
time, rewards, timings, the backend's). The rollout view's step page shows them beside the step's rollouts, and
Jaeger or Phoenix show the steps on the same timeline as the rollouts they trained on. With on-policy distillation,
each scored sample's teacher logprobs too (`agl.training.teacher`), which the rollout view shows token by token.

    with step_spans(run) as record:
        record(step, metrics, started_ns, trained, taught)  # after the step: one span from started_ns to now
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from lightning_otel import semconv
from lightning_otel.runtime.training_run import TrainingRun
from lightning_otel.training.loop.samples import Sample

Record = Callable[..., None]  # (step, metrics, started_ns, trained, taught)


@contextlib.contextmanager
def step_spans(run: TrainingRun) -> Iterator[Record]:
    """A recorder of step spans exporting to the run's collector (flushed when the block ends)."""
    from lightning_otel.serving.collector_tracer import collector_tracer

    with collector_tracer(run.client, service_name=semconv.TRAINER_SERVICE) as spans:

        def record(
            step: int,
            metrics: Mapping[str, float],
            started_ns: int,
            trained: Sequence[tuple[str, str, int]] = (),
            taught: Sequence[Sample] = (),
        ) -> None:
            attributes: dict[str, Any] = {
                semconv.AGL_RUN_ID: run.run_id,
                semconv.AGL_TRAINING_STEP: step,
            }
            if trained:
                attributes[semconv.AGL_TRAINED_ROLLOUTS] = [rollout for rollout, _, _ in trained]
                attributes[semconv.AGL_TRAINED_ATTEMPTS] = [attempt for _, attempt, _ in trained]
                attributes[semconv.AGL_TRAINED_VERSIONS] = [version for _, _, version in trained]
            for name, value in metrics.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    attributes[semconv.AGL_METRIC_PREFIX + name] = float(value)
            span = spans.tracer.start_span(semconv.TRAINING_STEP_SPAN, start_time=started_ns, attributes=attributes)
            span.end(end_time=time.time_ns())
            for sample in taught:  # on-policy distillation: the teacher's logprobs, for the rollout view
                teacher_span(spans.tracer, run.run_id, step, sample, started_ns)
            # sent now, before the step's checkpoint: a trainer killed after it resumes past this step, whose record
            # must then be in the store already (one request a step)
            spans.flush()

        yield record


def teacher_span(tracer: Any, run_id: str, step: int, sample: Sample, started_ns: int) -> None:
    """The teacher's logprobs of one sample's response tokens, under the call spans they cover."""
    triplet, logprobs = sample.triplet, sample.teacher_logprobs
    if triplet is None or not logprobs or not all(math.isfinite(value) for value in logprobs):
        return  # a token the teacher could not score: nothing JSON can carry, nothing to show
    attributes = {
        semconv.AGL_RUN_ID: run_id,
        semconv.AGL_TRAINING_STEP: step,
        semconv.AGL_TEACHER_ROLLOUT: sample.rollout,
        semconv.AGL_TEACHER_ATTEMPT: triplet.attempt_id or "",
        semconv.AGL_TEACHER_SPAN_IDS: list(triplet.span_ids),
        semconv.AGL_TEACHER_LOGPROBS: [float(value) for value in logprobs],
    }
    tracer.start_span(semconv.TEACHER_SPAN, start_time=started_ns, attributes=attributes).end(end_time=time.time_ns())
