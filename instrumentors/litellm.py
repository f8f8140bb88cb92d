"""LiteLLM instrumentation: `litellm.completion` / `acompletion` (and Google ADK's `LiteLLMClient.acompletion`).

Usage:

    from lightning_otel.instrumentors.litellm import LiteLLMInstrumentor
    LiteLLMInstrumentor().instrument()         # or `import lightning_otel.auto`

Same span contract as the OpenAI instrumentor; exactly one LLM span per call even when LiteLLM goes through the
OpenAI client. Token ids are requested (through `extra_body`) from trainable endpoints: pass `api_base`, or set
`AGL_TOKEN_IDS=1` when the base URL comes from LiteLLM's own configuration.

Agent name: resolved when the span starts, as for OpenAI (ADK's `invoke_agent {name}` spans are ancestors).
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

_instruments = ("litellm >= 1.70",)
_ADK_MODULE = "google.adk.models.lite_llm"


class LiteLLMInstrumentor(BaseInstrumentor):
    def __init__(self) -> None:
        super().__init__()
        self._tracer: trace.Tracer | None = None
        self._patches = Patches()

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        self._tracer = instrumentor_tracer(kwargs)
        when_imported("litellm", self._patch_litellm)
        when_imported(_ADK_MODULE, self._patch_adk)

    def _patch_litellm(self, litellm: ModuleType) -> None:
        if self._tracer is None:
            return
        from lightning_otel.instrumentors.litellm_wrappers import make_async_wrapper, make_sync_wrapper

        self._patches.wrap(litellm, "completion", make_sync_wrapper(self._tracer))
        self._patches.wrap(litellm, "acompletion", make_async_wrapper(self._tracer))

    def _patch_adk(self, module: ModuleType) -> None:
        if self._tracer is None:
            return
        from lightning_otel.instrumentors.litellm_wrappers import make_async_wrapper

        self._patches.wrap(module, "LiteLLMClient.acompletion", make_async_wrapper(self._tracer))

    def _uninstrument(self, **kwargs: Any) -> None:
        self._tracer = None
        self._patches.unwrap_all()
