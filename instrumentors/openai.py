"""OpenAI client instrumentation: exactly one LLM span per HTTP request to a model.

Usage:

    from lightning_otel.instrumentors.openai import OpenAIInstrumentor
    OpenAIInstrumentor().instrument()          # or `import lightning_otel.auto`

Hook: `SyncAPIClient.request` / `AsyncAPIClient.request` (openai 2.x and 3.x), which every call shape goes
through: `create`, `.parse()`, `.with_raw_response`, `.with_streaming_response`, `stream=True`, `responses.create`,
`client.post`. Spans: `chat {model}` / `text_completion {model}` with the GenAI attributes, the token ids and
logprobs vLLM returned, and `agl.llm.token_ids_complete`.

Agent name: resolved when the span starts (`lightning_otel.agent`, framework sources, nearest agent ancestor).

Configuration:
- `AGL_TOKEN_IDS=1` / `AGL_TOKEN_ID_ENDPOINTS=<regex>`: ask these endpoints for token ids (vLLM >= 0.10.2).
- `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`: record message content (off by default).
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

_instruments = ("openai >= 2.0, < 4",)


class OpenAIInstrumentor(BaseInstrumentor):
    """Traces every LLM request made with `openai.OpenAI` / `openai.AsyncOpenAI` (and clients built on them)."""

    def __init__(self) -> None:
        super().__init__()
        self._tracer: trace.Tracer | None = None
        self._patches = Patches()

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        self._tracer = instrumentor_tracer(kwargs)
        when_imported("openai", self._patch)

    def _patch(self, _openai: ModuleType) -> None:
        if self._tracer is None:
            return  # uninstrumented before the import happened
        from lightning_otel.instrumentors.stainless_wrappers import make_async_wrapper, make_sync_wrapper

        base_client = __import__("openai._base_client", fromlist=["SyncAPIClient"])
        self._patches.wrap(base_client, "SyncAPIClient.request", make_sync_wrapper(self._tracer))
        self._patches.wrap(base_client, "AsyncAPIClient.request", make_async_wrapper(self._tracer))

    def _uninstrument(self, **kwargs: Any) -> None:
        self._tracer = None
        self._patches.unwrap_all()
