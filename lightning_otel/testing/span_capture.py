"""In-memory span capture: a span processor that keeps finished spans for assertions."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from lightning_otel import semconv
from lightning_otel.capture.span_finisher import finisher


class SpanCapture(SpanProcessor):
    """Collects ended spans in order. Attach with `lightning_otel.capture.setup.add_span_processor(capture)`."""

    def __init__(self) -> None:
        self._spans: list[ReadableSpan] = []
        self._lock = threading.Condition()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self._spans.append(span)
            self._lock.notify_all()

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    # --- queries ---------------------------------------------------------------------------------------------
    @property
    def spans(self) -> list[ReadableSpan]:
        """Ended spans, after the LLM spans still being finished in the background have ended."""
        finisher.drain(10.0)
        with self._lock:
            return list(self._spans)

    def clear(self) -> None:
        """Forget every span ended so far, the LLM spans still being finished included (they would otherwise end
        after the clear, in the next test's capture)."""
        finisher.drain(10.0)
        with self._lock:
            self._spans.clear()

    def where(self, predicate: Callable[[ReadableSpan], bool]) -> list[ReadableSpan]:
        return [span for span in self.spans if predicate(span)]

    def named(self, name: str) -> list[ReadableSpan]:
        return self.where(lambda span: span.name == name)

    def llm_spans(self) -> list[ReadableSpan]:
        """Spans of LLM calls, chosen by `gen_ai.operation.name` as the adapters do."""
        return self.where(
            lambda span: (span.attributes or {}).get(semconv.GEN_AI_OPERATION_NAME) in semconv.LLM_OPERATIONS
        )

    def agent_spans(self) -> list[ReadableSpan]:
        return self.where(
            lambda span: (span.attributes or {}).get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_INVOKE_AGENT
        )

    def reward_spans(self) -> list[ReadableSpan]:
        return self.named(semconv.REWARD_SPAN_NAME)

    def wait_for(self, predicate: Callable[[list[ReadableSpan]], bool], timeout_s: float = 5.0) -> list[ReadableSpan]:
        """Block until `predicate(spans)` holds (spans end on other threads, e.g. stream finalizers)."""
        deadline = time.monotonic() + timeout_s
        finisher.drain(timeout_s)
        with self._lock:
            while not predicate(list(self._spans)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"condition not met within {timeout_s}s; have {len(self._spans)} spans")
                self._lock.wait(remaining)
            return list(self._spans)
