"""Which of our instrumentors exist, which are selected, and loading one by name.

`instrument()` loads the ones whose library is installed; `OTEL_PYTHON_DISABLED_INSTRUMENTATIONS` skips names.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from collections.abc import Iterable

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

logger = logging.getLogger(__name__)

# name -> (module under lightning_otel.instrumentors, class, the top-level library it needs). Loaded by name, and
# only when the library is installed: capture never imports a framework it does not trace.
_REGISTRY: dict[str, tuple[str, str, str]] = {
    "openai": ("openai", "OpenAIInstrumentor", "openai"),
    "anthropic": ("anthropic", "AnthropicInstrumentor", "anthropic"),
    "litellm": ("litellm", "LiteLLMInstrumentor", "litellm"),
    "http_propagation": ("http_propagation", "HTTPPropagationInstrumentor", "httpx"),
    "openai_agents": ("openai_agents", "OpenAIAgentsInstrumentor", "agents"),
    "langchain": ("langchain", "LangChainInstrumentor", "langchain_core"),
    "autogen": ("autogen", "AutoGenInstrumentor", "autogen_agentchat"),
    "crewai": ("crewai", "CrewAIInstrumentor", "crewai"),
    "google_adk": ("google_adk", "GoogleADKInstrumentor", "google.adk"),
    "starlette": ("starlette_context", "StarletteContextInstrumentor", "starlette"),
}
NAMES: tuple[str, ...] = tuple(_REGISTRY)


def _installed(library: str) -> bool:
    """Whether `library` can be imported, without importing it (a dotted name whose parent is missing is not)."""
    try:
        return importlib.util.find_spec(library) is not None
    except ModuleNotFoundError:  # `google.adk` without any `google` package
        return False


def _disabled_by_env() -> set[str]:
    value = os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    names = {name.strip() for name in value.split(",") if name.strip()}
    # Accept both our short names and the entry-point names (`agl_openai`).
    return names | {name.removeprefix("agl_") for name in names}


def selected_names(requested: Iterable[str] | None) -> list[str]:
    if requested is None:
        names = [name for name, (_, _, library) in _REGISTRY.items() if _installed(library)]
    else:
        names = list(requested)
        unknown = [name for name in names if name not in _REGISTRY]
        if unknown:
            raise ValueError(f"unknown instrumentors {unknown}; choose from {list(NAMES)}")
    disabled = _disabled_by_env()
    return [name for name in names if name not in disabled]


def load_instrumentor(name: str) -> BaseInstrumentor | None:
    module_name, class_name, library = _REGISTRY[name]
    if not _installed(library):
        logger.debug("lightning-otel: %s is not installed, skipping its instrumentor", library)
        return None
    module = importlib.import_module(f"lightning_otel.instrumentors.{module_name}")
    return getattr(module, class_name)()
