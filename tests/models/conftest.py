"""SmolLM2-135M-Instruct, built once per machine (`lightning_otel.smollm2()`: its wheel, its hashes, the cache; the
build is locked, so test workers share it)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    import lightning_otel

    return lightning_otel.smollm2(say=False)
