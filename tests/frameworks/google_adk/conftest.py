"""The Google ADK tests run in the `verl` lane (`nox -s verl`): one environment with ADK (OpenTelemetry <= 1.44),
LiteLLM, the trainer and VERL, installed from constraints-adk.txt."""
