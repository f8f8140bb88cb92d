"""AutoGen (agentchat 0.7+) instrumentation: AutoGen traces itself, this makes its spans part of the rollout.

Usage:

    from lightning_otel.instrumentors.autogen import AutoGenInstrumentor
    AutoGenInstrumentor().instrument()             # or `import lightning_otel.auto`

AutoGen emits GenAI spans natively on the global tracer provider: `invoke_agent {name}` (with `gen_ai.agent.name`)
around each agent turn, `execute_tool {name}` per tool call (handoffs included, as `transfer_to_*` tools), and its
runtime's message spans (`autogen publish/process/...`; `AUTOGEN_DISABLE_RUNTIME_TRACING=true` turns those off).
They are kept as they are, never duplicated. What this instrumentor adds is making sure our span processors are on
that provider (rollout identity stamped on every span, the agent map that names LLM spans), also when the process
runs under `opentelemetry-instrument`; the LLM calls themselves are the OpenAI client's spans (autogen-ext's
`OpenAIChatCompletionClient`), which nest under AutoGen's `invoke_agent` span and so carry its agent name.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from lightning_otel.tracing import instrumentor_tracer

_instruments = ("autogen-agentchat >= 0.7",)


class AutoGenInstrumentor(BaseInstrumentor):
    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        instrumentor_tracer(kwargs)  # our processors on the provider AutoGen's spans go to

    def _uninstrument(self, **kwargs: Any) -> None:
        return None  # nothing patched; `lightning_otel.uninstrument()` disables our processors
