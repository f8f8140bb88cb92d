"""The agent side of training: what a runner calls for each rollout.

    class SQLAgent(lightning_otel.LitAgent[dict]):
        async def rollout_async(self, task, resources, rollout):
            answer = await run_my_graph(task["question"], resources["main_llm"])
            return 1.0 if answer == task["expected"] else 0.0

Implement `rollout` (sync, or `async def`), or `rollout_async`; override `training_rollout(_async)` /
`validation_rollout(_async)` when validation differs (Agent Lightning's names, dispatched the same way). A rollout
returns a float (the `primary` reward), a dict of named rewards, or None when it emitted its rewards with
`lightning_otel.emit_reward`. Plain functions become agents with `@lightning_otel.rollout` (function_agent.py).
Runners run agents in other processes, so an agent must be picklable: define it at module level (and guard scripts
with `if __name__ == "__main__":`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

Reward = float | dict[str, float] | None
NamedResources = dict[str, Any]  # Agent Lightning's name for the resources mapping
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try of a rollout (Agent Lightning's `rollout.attempt`)."""

    attempt_id: str
    rollout_id: str
    sequence_id: int = 1  # 1 for the first attempt, 2 for its first retry, ...
    worker_id: str | None = None  # the runner running it


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
    input: Any = None  # the task, as queued
    runner_id: str | None = None

    @property
    def attempt(self) -> Attempt:
        return Attempt(self.attempt_id, self.rollout_id, self.attempt_number, self.runner_id)


class LitAgent(Generic[T]):
    """Subclass and implement `rollout` (sync or async) or `rollout_async`. `LitAgent[MyTask]` types the task."""

    def rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> Reward | Awaitable[Reward]:
        raise NotImplementedError(f"{type(self).__name__} must implement rollout(task, resources, rollout)")

    async def rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> Reward:
        raise NotImplementedError(f"{type(self).__name__} must implement rollout_async(task, resources, rollout)")

    def training_rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> Reward | Awaitable[Reward]:
        return self.rollout(task, resources, rollout)

    def validation_rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> Reward | Awaitable[Reward]:
        return self.rollout(task, resources, rollout)

    async def training_rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> Reward:
        return await self.rollout_async(task, resources, rollout)

    async def validation_rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> Reward:
        return await self.rollout_async(task, resources, rollout)

    def is_async(self) -> bool:
        """Whether training rollouts run on the event loop (else in a worker thread)."""
        return rollout_method(self, "train")[1]

    @property
    def name(self) -> str:
        """The agent's name: `agent_match` selects every LLM call of its rollouts by it (default: the class name)."""
        return getattr(self, "_agl_name", None) or type(self).__name__

    @name.setter
    def name(self, value: str) -> None:
        self._agl_name = value

    def match_names(self) -> list[str]:
        """Names an `agent_match` pattern may use for this agent: its `name` and its class name."""
        return list(dict.fromkeys([self.name, type(self).__name__]))

    @property
    def tracer(self) -> CompatTracer:
        """Agent Lightning's `self.tracer`: tracing here is global, so its hooks are no-ops kept for old code."""
        return CompatTracer()


class CompatTracer:
    """What Agent Lightning agents ask their tracer for. LangChain/LangGraph are traced by a global hook here, so
    the handler an old agent passes in `callbacks` records nothing (it would record every run twice)."""

    def get_langchain_handler(self) -> Any:
        from langchain_core.callbacks import BaseCallbackHandler

        return BaseCallbackHandler()


# Per mode, the methods tried in order: the first one the agent's class overrides runs (`rollout` always can).
_DISPATCH = {
    "train": ("training_rollout_async", "training_rollout", "rollout_async"),
    "val": ("validation_rollout_async", "validation_rollout", "rollout_async"),
}


def _overrides(agent: LitAgent, name: str) -> bool:
    return getattr(type(agent), name, None) is not getattr(LitAgent, name)


def rollout_method(agent: LitAgent, mode: str) -> tuple[Callable[..., Any], bool]:
    """The bound method that runs a rollout of `mode` and whether it is a coroutine function."""
    for name in _DISPATCH.get(mode, _DISPATCH["train"]):
        if _overrides(agent, name):
            method = getattr(agent, name)
            return method, inspect.iscoroutinefunction(method)
    if hasattr(agent, "is_async_function"):  # a wrapped function decides by itself
        return agent.rollout, agent.is_async_function()
    return agent.rollout, inspect.iscoroutinefunction(agent.rollout)


def check_agent(agent: LitAgent) -> None:
    """An agent that implements no rollout method is an error before any runner starts."""
    names = ("rollout", *(name for names in _DISPATCH.values() for name in names))
    if not any(_overrides(agent, name) for name in names) and not hasattr(agent, "is_async_function"):
        raise TypeError(
            f"{type(agent).__name__} implements none of rollout / rollout_async / training_rollout / "
            "validation_rollout: implement rollout(task, resources, rollout)"
        )
