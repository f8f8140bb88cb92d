"""Capture: the code that runs inside the user's agent process.

Setup (`instrument`, `uninstrument`, `flush`), capture settings, the rollout context and its W3C propagation,
agent naming, rewards, and the recording of LLM calls (deferred span, span finisher, fast OTLP encoding for the
exporters we construct). Imports only the wire contract (`lightning_otel.semconv`) and OpenTelemetry: an agent
that does `import lightning_otel.auto` loads nothing of the trainer, the collector or the serving side.
"""
