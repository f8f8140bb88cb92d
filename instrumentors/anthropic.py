"""Anthropic client instrumentation: exactly one LLM span per HTTP request to a model, as for OpenAI's client.

Usage:

    from lightning_otel.instrumentors.anthropic import AnthropicInstrumentor
    AnthropicInstrumentor().instrument()          # or `import lightning_otel.auto`

Hook: `SyncAPIClient.request` / `AsyncAPIClient.request` of the `anthropic` SDK (Stainless generates it as it does
openai's: `stainless_wrappers` serves both), which `messages.create` (sync and async, `stream=True`),
`messages.stream(...)`, `.with_raw_response` and `.with_streaming_response` go through. Spans: `chat {model}` with
the GenAI attributes (`gen_ai.provider.name: anthropic`), the response id, stop reason and usage, the agent and the
rollout from the context, and, with content capture on, the messages (the `system` prompt, text, `tool_use` and
`tool_result` blocks). Anthropic's API returns no token ids: a call through the policy gateway is recorded by the
gateway with the replica's ids under the same response id, and the adapter keeps one call (this span's agent
name, the gateway's ids). `messages/count_tokens` is no model call and records no span.
"""

from __future__ import annotations

from lightning_otel.instrumentors.stainless_wrappers import StainlessClientInstrumentor


class AnthropicInstrumentor(StainlessClientInstrumentor):
    """Traces every model request made with `anthropic.Anthropic` / `anthropic.AsyncAnthropic`."""

    sdk = "anthropic"
    instruments = ("anthropic >= 0.40",)
