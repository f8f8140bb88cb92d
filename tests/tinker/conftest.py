"""The tiny offline Qwen2 (and its tokenizer) as a model folder, for the local engine."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lightning_otel.testing.tiny_model import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tinker-base") / "tiny")
