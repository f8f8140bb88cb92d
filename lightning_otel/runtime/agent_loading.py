"""What may be passed as an agent (`Trainer.fit(agent)`, `--agent package.module:name`) and how it becomes one."""

from __future__ import annotations

from typing import Any

from lightning_otel.runtime.function_agent import FunctionAgent, find_attribute
from lightning_otel.runtime.lit_agent import LitAgent


def load_agent(spec: str) -> LitAgent:
    """`package.module:name` -> the agent: a LitAgent instance, a LitAgent subclass (instantiated), or a function."""
    return as_agent(find_attribute(spec))


def as_agent(target: Any) -> LitAgent:
    if isinstance(target, LitAgent):
        return target
    if isinstance(target, type) and issubclass(target, LitAgent):
        return target()
    if callable(target):
        return FunctionAgent(target)
    raise TypeError(f"{target!r} is not an agent: use a LitAgent, a LitAgent subclass or a @rollout function")
