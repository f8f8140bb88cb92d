"""A reward model for the service and client tests: the tiny offline Qwen2 with a (random) one-label head, served
on loopback by the real service."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

API_KEY = "rm-secret"


@pytest.fixture(scope="session")
def base_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny causal LM a reward model is trained from."""
    from lightning_otel.testing.tiny_model import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-base") / "tiny-base")


@pytest.fixture(scope="session")
def reward_model_dir(base_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reward model as `reward-model train` saves one: the base with a one-label head (here untrained, saved)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = tmp_path_factory.mktemp("tiny-rm") / "tiny-rm"
    model = AutoModelForSequenceClassification.from_pretrained(base_model_dir, num_labels=1)
    tokenizer = AutoTokenizer.from_pretrained(base_model_dir)
    model.config.pad_token_id = tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def scorer(reward_model_dir: Path):
    from lightning_otel.rewards.scorer import RewardModelScorer

    return RewardModelScorer(reward_model_dir)


@pytest.fixture
def service(scorer) -> Iterator[str]:
    """A fresh service per test (its batch counters start at 0), sharing the loaded model."""
    from lightning_otel.rewards.server import build_reward_model_app
    from lightning_otel.serving.app_server import AppServer

    app = build_reward_model_app(scorer, api_key=API_KEY, max_batch=32, max_wait_s=0.01)
    with AppServer(app, name="reward-model-test") as server:
        yield f"http://{server.host}:{server.port}"
