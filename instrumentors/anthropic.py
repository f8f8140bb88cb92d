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

from collections.abc import Collection
from types import ModuleType
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from lightning_otel.capture.setup import instrumentor_tracer
from lightning_otel.instrumentors.import_hooks import when_imported
from lightning_otel.instrumentors.patches import Patches

_instruments = ("anthropic >= 0.40",)


class AnthropicInstrumentor(BaseInstrumentor):
    """Traces every model request made with `anthropic.Anthropic` / `anthropic.AsyncAnthropic`."""

    def __init__(self) -> None:
        super().__init__()
        self._tracer: trace.Tracer | None = None
        self._patches = Patches()

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        self._tracer = instrumentor_tracer(kwargs)
        when_imported("anthropic", self._patch)

    def _patch(self, _anthropic: ModuleType) -> None:
        if self._tracer is None:
            return  # uninstrumented before the import happened
        from lightning_otel.instrumentors.stainless_wrappers import make_async_wrapper, make_sync_wrapper

        base_client = __import__("anthropic._base_client", fromlist=["SyncAPIClient"])
        self._patches.wrap(base_client, "SyncAPIClient.request", make_sync_wrapper(self._tracer, "anthropic"))
        self._patches.wrap(base_client, "AsyncAPIClient.request", make_async_wrapper(self._tracer, "anthropic"))

    def _uninstrument(self, **kwargs: Any) -> None:
        self._tracer = None
        self._patches.unwrap_all()
