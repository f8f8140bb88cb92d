"""The tiny random model, built once for the module's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lightning_otel.testing import save_tiny_model

    return Path(save_tiny_model(tmp_path_factory.mktemp("model")))
