"""The Google ADK lane (`nox -s google_adk`): its own environment (ADK pins OpenTelemetry <= 1.44)."""
