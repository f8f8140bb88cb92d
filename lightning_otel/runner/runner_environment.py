"""The environment of the runner processes lightning-otel starts: offline defaults where the user has not chosen.

LiteLLM downloads its model cost map from GitHub when it is imported, unless `LITELLM_LOCAL_MODEL_COST_MAP` is set:
on a machine without internet that is ~7 s per process (every runner imports the agent, often LiteLLM with it). A
runner only needs the bundled map, so runners get `True` unless the variable is already set (either way).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

OFFLINE_DEFAULTS = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def apply_offline_defaults() -> None:
    """In a runner process we own (`lightning-otel runner`), before the agent is imported."""
    for key, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(key, value)


@contextlib.contextmanager
def offline_defaults_for_children() -> Iterator[None]:
    """Around starting a child process: it inherits the defaults; this process's environment is restored after.
    (A spawned child imports the agent's module before any code of ours runs in it, so it must inherit them.)"""
    added = [key for key in OFFLINE_DEFAULTS if key not in os.environ]
    for key in added:
        os.environ[key] = OFFLINE_DEFAULTS[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)
