"""`python -m lightning_otel.cli ...` is `lightning-otel ...`."""

from lightning_otel.cli.main import main

main()
