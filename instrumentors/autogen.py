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

from lightning_otel.instrumentors.native_spans import NativeSpansInstrumentor


class AutoGenInstrumentor(NativeSpansInstrumentor):
    dependencies = ("autogen-agentchat >= 0.7",)
