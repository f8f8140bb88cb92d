"""The releases of other libraries whose internals we touch, as they were tested (a major or major.minor prefix).

Each module that reaches into a library's private objects (`otel_internals` for opentelemetry-sdk and -api,
`otlp_exporters` for the OTLP exporters, the OpenAI instrumentor's `openai_wrappers`) checks `is_tested(...)` and
takes its public-API path on any other release: slower, never wrong. verl has no public path for what the VERL
backend does: `training/verl/verl_internals.py` refuses another release with the install line, and so does DPO
(`training/dpo/trl_dpo.py`), which would otherwise train on re-tokenized text instead of the sampled tokens.
"""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version

TESTED: dict[str, frozenset[str]] = {
    "opentelemetry-sdk": frozenset({"1.44", "1.45"}),
    "opentelemetry-api": frozenset({"1.44", "1.45"}),
    "opentelemetry-exporter-otlp-proto-http": frozenset({"1.45"}),  # its send path moved to `_client` in 1.45
    "opentelemetry-exporter-otlp-proto-grpc": frozenset({"1.44", "1.45"}),
    "openai": frozenset({"2", "3"}),  # request options updated in place (openai builds them for each call)
    "verl": frozenset({"0.9.1"}),  # training/verl/verl_internals.py: the legacy trainer's pieces, the CPU backend
    "trl": frozenset({"0.29"}),  # training/dpo/trl_dpo.py: DPOTrainer without its re-tokenizing dataset step
}


@functools.cache
def installed_version(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


@functools.cache
def is_tested(distribution: str) -> bool:
    """Whether the installed release of `distribution` starts with one of its tested prefixes."""
    installed = installed_version(distribution)
    return installed is not None and any(
        installed == prefix or installed.startswith(prefix + ".") for prefix in TESTED[distribution]
    )
