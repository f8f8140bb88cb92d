"""For frameworks that trace themselves with GenAI spans on the global tracer provider (AutoGen, Google ADK).

Nothing is patched: their spans are kept as they are. What the instrumentor does is put our span processors on
the provider those spans go to (rollout ids stamped on every span, the agent map that names LLM spans), also when
the process runs under `opentelemetry-instrument`, which brings its own provider.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from lightning_otel.capture.setup import instrumentor_tracer


class NativeSpansInstrumentor(BaseInstrumentor):
    dependencies: tuple[str, ...] = ()

    def instrumentation_dependencies(self) -> Collection[str]:
        return self.dependencies

    def _instrument(self, **kwargs: Any) -> None:
        instrumentor_tracer(kwargs)

    def _uninstrument(self, **kwargs: Any) -> None:
        return None  # nothing patched; `lightning_otel.uninstrument()` disables our processors
