"""What may be passed as an agent (`Trainer.fit(agent)`, `--agent package.module:name`) and how it becomes one."""

from __future__ import annotations

from typing import Any

from lightning_otel.agent_api.function_agent import FunctionAgent, find_attribute
from lightning_otel.agent_api.lit_agent import LitAgent


def load_agent(spec: str) -> LitAgent:
    """`package.module:name` -> the agent: a LitAgent instance, a LitAgent subclass (instantiated), or a function."""
    return as_agent(find_attribute(spec))


class AgentElsewhere(LitAgent):
    """`Trainer(n_runners=0).fit("package.module:name")`: an agent only runners started elsewhere run (its
    environment may not even install here), so it is named, never imported, in the trainer's process."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.name = spec.rsplit(":", 1)[-1]

    def rollout(self, task: Any, resources: Any, rollout: Any) -> Any:
        raise RuntimeError(f"{self.spec} runs in runners started elsewhere (lightning-otel runner --agent {self.spec})")


def as_agent(target: Any, *, import_spec: bool = True) -> LitAgent:
    """`target` as a LitAgent; a "package.module:name" string is imported, or, with `import_spec=False` (no
    runner of this process will run it), kept as a name (`AgentElsewhere`)."""
    if isinstance(target, str):
        return load_agent(target) if import_spec else AgentElsewhere(target)
    if isinstance(target, LitAgent):
        return target
    if isinstance(target, type) and issubclass(target, LitAgent):
        return target()
    if callable(target):
        return FunctionAgent(target)
    raise TypeError(f"{target!r} is not an agent: use a LitAgent, a LitAgent subclass or a @rollout function")
