"""The keywords `Trainer` took before its settings became values, and Agent Lightning's spellings, mapped onto
`RunSettings` and `RunnerOptions`.

    Trainer(max_attempts=5)        # works until 0.3, with a DeprecationWarning: Trainer(settings=RunSettings(...))
    Trainer(n_workers=2)           # Agent Lightning's spelling of n_runners: a DeprecationWarning naming it
    Trainer(max_rollouts=8)        # Agent Lightning's and ours: RunnerOptions(max_rollouts=8), no warning

One module so the whole list of old spellings, and where each went, is in one place (CHANGELOG.md says when).
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

from lightning_otel.runner.runner_options import RunnerOptions
from lightning_otel.runtime.training_run import RunSettings

# Trainer's own keywords before 0.2 -> (the value that holds it now, its field there)
MOVED: dict[str, tuple[str, str]] = {
    "max_attempts": ("settings", "max_attempts"),
    "rollout_timeout_s": ("settings", "rollout_timeout_s"),
    "span_wait_s": ("settings", "span_wait_s"),
    "policy_notify_file": ("settings", "policy_notify_file"),
    "no_runner_timeout_s": ("settings", "no_runner_timeout_s"),
    "collector_retry_s": ("settings", "collector_retry_s"),
    "run_id": ("settings", "run_id"),
    "max_concurrency": ("runner_options", "max_concurrency"),
    "capture_content": ("runner_options", "capture_content"),
    "rollout_limits": ("runner_options", "limits"),
}
CLASS_OF = {"settings": "RunSettings", "runner_options": "RunnerOptions"}
# Agent Lightning's Trainer keywords (the seeds'): where each goes here; a warning only where the name differs
AGENT_LIGHTNING: dict[str, tuple[str, str] | None] = {
    "max_rollouts": ("runner_options", "max_rollouts"),
    "n_workers": None,  # -> n_runners, resolved by the Trainer itself
    "max_tasks": ("runner_options", "max_rollouts"),
}


def settings_from_keywords(
    keywords: dict[str, Any], settings: RunSettings | None, runner_options: RunnerOptions | None
) -> tuple[RunSettings, RunnerOptions]:
    """`settings` and `runner_options` (defaults where None) with the old keywords in `keywords` applied, each
    popped, warned about where it moved, and refused when the value it moved to also sets it."""
    values: dict[str, Any] = {"settings": settings or RunSettings(),
                              "runner_options": runner_options or RunnerOptions()}  # fmt: skip
    given = {"settings": settings is not None, "runner_options": runner_options is not None}
    for old in [key for key in keywords if key in MOVED or AGENT_LIGHTNING.get(key)]:
        value = keywords.pop(old)
        holder, name = MOVED.get(old) or AGENT_LIGHTNING[old]  # type: ignore[misc]
        spelling = f"Trainer({holder}={CLASS_OF[holder]}({name}=...))"
        if old in MOVED:
            warnings.warn(f"Trainer({old}=...) is deprecated (until 0.3): use {spelling}", DeprecationWarning, 3)
        elif old != name:
            warnings.warn(f"Trainer({old}=...) is Agent Lightning's spelling: use {spelling}", DeprecationWarning, 3)
        unset = getattr(type(values[holder])(), name)
        if given[holder] and getattr(values[holder], name) != unset and value is not None:
            raise TypeError(f"Trainer got {old}= and {holder}= setting {name}: pass it once, {spelling}")
        if value is not None:
            values[holder] = replace(values[holder], **{name: value})
    return values["settings"], values["runner_options"]


__all__ = ["AGENT_LIGHTNING", "MOVED", "settings_from_keywords"]
