"""`python -m lightning_otel.testing [--port 8000]`: run the OpenAI-compatible test server."""

from lightning_otel.testing.server import main

main()
