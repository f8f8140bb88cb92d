"""The agent side of training: what a runner calls for each rollout.

    class SQLAgent(lightning_otel.LitAgent):
        async def rollout(self, task, resources, rollout):
            answer = await run_my_graph(task["question"], resources["main_llm"])
            return 1.0 if answer == task["expected"] else 0.0

    @lightning_otel.rollout
    def math_agent(task, resources, rollout):
        ...
        lightning_otel.emit_reward(0.5)      # or emit rewards yourself and return None

`rollout` may be sync (run in a worker thread) or async. It returns a float (the `primary` reward), a dict of named
rewards, or None when it emitted its rewards with `lightning_otel.emit_reward`. Runners run agents in other
processes, so an agent must be picklable: define it at module level (and guard scripts with
`if __name__ == "__main__":`).
"""

from __future__ import annotations

import importlib
import inspect
import pickle
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

Reward = float | dict[str, float] | None


@dataclass(frozen=True, slots=True)
class Rollout:
    """What a rollout knows about itself."""

    rollout_id: str
    attempt_id: str
    attempt_number: int = 1
    task_id: str = ""
    group_id: str = ""
    mode: str = "train"  # train, val or dev
    resources_version: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class LitAgent:
    """Subclass and implement `rollout` (sync or async)."""

    def rollout(self, task: Any, resources: dict[str, Any], rollout: Rollout) -> Reward | Awaitable[Reward]:
        raise NotImplementedError(f"{type(self).__name__} must implement rollout(task, resources, rollout)")

    @property
    def name(self) -> str:
        return type(self).__name__


class FunctionAgent(LitAgent):
    """A plain function as an agent; it may take (task), (task, resources) or (task, resources, rollout)."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        parameters = [
            p
            for p in inspect.signature(function).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if not 1 <= len(parameters) <= 3:
            raise TypeError(
                f"@rollout function {function.__qualname__} must take (task), (task, resources) or "
                f"(task, resources, rollout); it takes {len(parameters)} positional parameters"
            )
        self._arity = len(parameters)
        self.__name__ = function.__name__
        self.__qualname__ = function.__qualname__
        self.__module__ = function.__module__
        self.__doc__ = function.__doc__

    def rollout(self, task: Any, resources: dict[str, Any], rollout: Rollout) -> Any:
        return self.function(*(task, resources, rollout)[: self._arity])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.function)

    @property
    def name(self) -> str:
        return self.function.__name__

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        # The module attribute is this wrapper, not the function: pickle by reference to it, and only when that
        # reference leads back here (a function defined inside another one cannot be found by a runner).
        spec = f"{self.__module__}:{self.__qualname__}"
        try:
            found = load_agent(spec)
        except Exception:
            found = None
        if found is not self and getattr(found, "function", None) is not self.function:
            raise pickle.PicklingError(f"{spec} does not name this agent at module level")
        return load_agent, (spec,)


def rollout(function: Callable[..., Any]) -> FunctionAgent:
    """Decorator: make a plain (sync or async) function an agent the Trainer can run."""
    return FunctionAgent(function)


def is_async_agent(agent: LitAgent) -> bool:
    if isinstance(agent, FunctionAgent):
        return agent.is_async
    return inspect.iscoroutinefunction(agent.rollout)


def load_agent(spec: str) -> LitAgent:
    """`package.module:name` -> the agent: a LitAgent instance, a LitAgent subclass (instantiated), or a function."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"agent {spec!r} must look like package.module:name")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return as_agent(target)


def as_agent(target: Any) -> LitAgent:
    if isinstance(target, LitAgent):
        return target
    if isinstance(target, type) and issubclass(target, LitAgent):
        return target()
    if callable(target):
        return FunctionAgent(target)
    raise TypeError(f"{target!r} is not an agent: use a LitAgent, a LitAgent subclass or a @rollout function")
