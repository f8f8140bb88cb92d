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

from lightning_otel.instrumentors.native_spans import NativeSpansInstrumentor


class GoogleADKInstrumentor(NativeSpansInstrumentor):
    dependencies = ("google-adk >= 1.0",)  # the LiteLLM instrumentor owns the ADK model hook
