"""Our OpenTelemetry instrumentors, one module per library (imported as `lightning_otel.instrumentors`).

Each is a `BaseInstrumentor`; `lightning_otel.instrument()` and `import lightning_otel.auto` load the ones whose
library is installed, and `opentelemetry-instrument` finds them through the `opentelemetry_instrumentor` entry
points (`agl_openai`, `agl_litellm`, `agl_http_propagation`, `agl_openai_agents`, `agl_langchain`, `agl_autogen`,
`agl_crewai`, `agl_google_adk`, `agl_starlette`). Patching waits until the library is imported, so instrumenting
costs nothing for libraries the agent never uses.
"""

from lightning_otel.capture.instrumentor_registry import NAMES, load_instrumentor, selected_names

__all__ = ["NAMES", "load_instrumentor", "selected_names"]
