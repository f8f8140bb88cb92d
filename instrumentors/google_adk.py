"""Google ADK (2.x) instrumentation: ADK traces itself; its model calls are LiteLLM's spans.

Usage:

    from lightning_otel.instrumentors.google_adk import GoogleADKInstrumentor
    GoogleADKInstrumentor().instrument()           # or `import lightning_otel.auto`

ADK emits GenAI spans natively on the global tracer provider (`invoke_workflow`, `invoke_agent {name}`,
`generate_content {model}`, `execute_tool {name}`, transfers included as `transfer_to_agent`); they are kept as
they are. Its `generate_content` spans are not LLM spans in our contract (no token ids; the adapter selects
`chat`/`text_completion`), so nothing is counted twice: each model call is one `chat` span from the LiteLLM
instrumentor, which wraps ADK's `LiteLLMClient.acompletion`, nested under ADK's spans and named after the ADK agent.
This instrumentor makes sure our processors are on the provider ADK uses, also under `opentelemetry-instrument`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from lightning_otel.tracing import instrumentor_tracer

_instruments = ("google-adk >= 1.0",)


class GoogleADKInstrumentor(BaseInstrumentor):
    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        instrumentor_tracer(kwargs)  # our processors on the provider ADK's spans go to

    def _uninstrument(self, **kwargs: Any) -> None:
        return None  # nothing patched here (the LiteLLM instrumentor owns the ADK model hook)
