"""The releases of other libraries whose internals we touch, as they were tested (major.minor).

Each module that reaches into a library's private objects (`sdk_internals` for opentelemetry-sdk, `otlp_exporters`
for the OTLP exporters, the OpenAI and LiteLLM instrumentors) checks `is_tested(...)` and takes its public-API
path on any other release: slower, never wrong.
"""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version

TESTED: dict[str, frozenset[str]] = {
    "opentelemetry-sdk": frozenset({"1.44", "1.45"}),
    "opentelemetry-exporter-otlp-proto-http": frozenset({"1.45"}),  # its send path moved to `_client` in 1.45
    "opentelemetry-exporter-otlp-proto-grpc": frozenset({"1.44", "1.45"}),
}


@functools.cache
def minor_version(distribution: str) -> str | None:
    """`major.minor` of the installed `distribution`, None when it is not installed."""
    try:
        return ".".join(version(distribution).split(".")[:2])
    except PackageNotFoundError:
        return None


def is_tested(distribution: str) -> bool:
    return minor_version(distribution) in TESTED[distribution]
