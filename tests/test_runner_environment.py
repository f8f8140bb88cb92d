"""Runner processes start offline where the user has not chosen (LiteLLM's cost map), and the user's choice wins."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from lightning_otel.runner.runner_environment import offline_defaults_for_children

KEY = "LITELLM_LOCAL_MODEL_COST_MAP"


def _report(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(os.environ.get(KEY))


def child_sees() -> str | None:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    with offline_defaults_for_children():
        process = context.Process(target=_report, args=(queue,))
        process.start()
    process.join(60)
    return queue.get(timeout=5)


def test_a_spawned_runner_gets_the_local_cost_map_and_this_process_is_left_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(KEY, raising=False)
    assert child_sees() == "True"
    assert KEY not in os.environ


def test_the_users_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY, "False")
    assert child_sees() == "False"
    assert os.environ[KEY] == "False"
