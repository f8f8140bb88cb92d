"""`@rollout` / `@llm_rollout`: a plain (sync or async) function as an agent, its arguments bound by name.

    @lightning_otel.rollout
    def guess_number(task, llm: lightning_otel.LLM) -> float:      # Agent Lightning's form
        client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key)
        ...

    @lightning_otel.rollout
    def sql_agent(task, resources, rollout): ...                 # the resources mapping and the rollout

Each parameter is bound by its name or its annotation, never by its position:

- `task` (or the first parameter): the task, as queued;
- `llm`, or annotated `LLM`: the LLM resource (`main_llm` when there are several); a `ProxyLLM` comes resolved to
  this rollout's URL;
- `resources`: the whole resources mapping;
- `rollout`, or annotated `Rollout`: the `Rollout` (ids, attempt, mode);
- `prompt_template`, or annotated `PromptTemplate`: the prompt-template resource.

A parameter none of these names is a TypeError when the function is decorated (unless it has a default).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import pickle
import typing
from collections.abc import Callable
from typing import Any

from lightning_otel.agent_api.lit_agent import LitAgent, NamedResources, Rollout
from lightning_otel.agent_api.resources import LLM, PromptTemplate, ProxyLLM

log = logging.getLogger("lightning_otel.agent_api.function_agent")

_BY_NAME = {"task": "task", "llm": "llm", "resources": "resources", "rollout": "rollout", "prompt_template": "prompt"}
_BY_TYPE = {LLM: "llm", ProxyLLM: "llm", Rollout: "rollout", PromptTemplate: "prompt"}
_BY_TYPE_NAME = {cls.__name__: role for cls, role in _BY_TYPE.items()}


def _role_of_annotation(annotation: Any) -> str | None:
    if isinstance(annotation, str):  # unresolvable string annotation: `agl.LLM`, `"Rollout"`
        return _BY_TYPE_NAME.get(annotation.rsplit(".", 1)[-1].strip("'\""))
    for cls, role in _BY_TYPE.items():
        if annotation is cls or (isinstance(annotation, type) and issubclass(annotation, cls)):
            return role
    return None


def bind_parameters(function: Callable[..., Any]) -> list[tuple[str, str, bool]]:
    """(parameter name, role, positional-only) for every parameter the runner fills; a TypeError naming the
    parameter it cannot fill."""
    signature = inspect.signature(function)
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # annotations naming what the module cannot resolve: read them as strings
        hints = {name: p.annotation for name, p in signature.parameters.items()}
    bound: list[tuple[str, str, bool]] = []
    roles: set[str] = set()
    parameters = list(signature.parameters.values())
    for index, parameter in enumerate(parameters):
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        annotation = hints.get(parameter.name, parameter.empty)
        role = _BY_NAME.get(parameter.name) or (
            _role_of_annotation(annotation) if annotation is not parameter.empty else None
        )
        if role is None and index == 0 and "task" not in (p.name for p in parameters):
            role = "task"  # the first parameter is the task whatever its name
        if role is None:
            if parameter.default is not parameter.empty:
                continue
            raise TypeError(
                f"@rollout function {function.__qualname__}: cannot bind parameter {parameter.name!r}. Parameters "
                "are bound by name or annotation: task, llm (or `: LLM`), resources, rollout (or `: Rollout`), "
                "prompt_template (or `: PromptTemplate`)"
            )
        if role in roles:
            raise TypeError(f"@rollout function {function.__qualname__}: two parameters take the {role}")
        roles.add(role)
        bound.append((parameter.name, role, parameter.kind is parameter.POSITIONAL_ONLY))
    if "task" not in roles:
        raise TypeError(f"@rollout function {function.__qualname__} takes no task parameter")
    return bound


def llm_for_rollout(resources: NamedResources, rollout: Rollout) -> LLM:
    """The LLM resource an `llm` parameter receives: the only one, else `main_llm`, else the first (warned)."""
    llms = {name: value for name, value in resources.items() if isinstance(value, LLM)}
    if not llms:
        raise ValueError(f"the agent takes an `llm` but the resources hold no LLM (resources: {sorted(resources)})")
    if len(llms) == 1:
        llm = next(iter(llms.values()))
    elif "main_llm" in llms:
        llm = llms["main_llm"]
    else:
        name = next(iter(llms))
        log.warning("several LLM resources %s and none is main_llm: `llm` gets %r", sorted(llms), name)
        llm = llms[name]
    if isinstance(llm, ProxyLLM):  # this rollout's URL, as Agent Lightning's strip_proxy does
        return LLM(llm.get_base_url(rollout.rollout_id, rollout.attempt_id), llm.model, llm.sampling_parameters,
                   llm.api_key)  # fmt: skip
    return llm


def prompt_template_for(resources: NamedResources) -> Any:
    for value in resources.values():
        if isinstance(value, PromptTemplate):
            return value
    if "prompt_template" in resources:
        return resources["prompt_template"]
    raise ValueError(f"the agent takes a `prompt_template` but no resource is one (resources: {sorted(resources)})")


class FunctionAgent(LitAgent):
    """A plain function as an agent (see the module docstring for how its parameters are filled)."""

    def __init__(self, function: Callable[..., Any], *, require_llm: bool = False) -> None:
        self.function = function
        self._parameters = bind_parameters(function)
        if require_llm and not any(role == "llm" for _, role, _ in self._parameters):
            raise TypeError(f"@llm_rollout function {function.__qualname__} takes no `llm` parameter")
        self.__name__ = function.__name__
        self.__qualname__ = function.__qualname__
        self.__module__ = function.__module__
        self.__doc__ = function.__doc__

    def rollout(self, task: Any, resources: NamedResources, rollout: Rollout) -> Any:
        values = {"task": task, "resources": resources, "rollout": rollout}
        args, kwargs = [], {}
        for name, role, positional in self._parameters:
            if role == "llm":
                value = llm_for_rollout(resources, rollout)
            elif role == "prompt":
                value = prompt_template_for(resources)
            else:
                value = values[role]
            if positional:
                args.append(value)
            else:
                kwargs[name] = value
        return self.function(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def is_async_function(self) -> bool:
        return inspect.iscoroutinefunction(self.function)

    @property
    def name(self) -> str:
        return self.function.__name__

    def match_names(self) -> list[str]:
        return [self.function.__name__]

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        # The module attribute is this wrapper, not the function: pickle by reference to it, and only when that
        # reference leads back here (a function defined inside another one cannot be found by a runner).
        spec = f"{self.__module__}:{self.__qualname__}"
        try:
            found = find_attribute(spec)
        except Exception:
            found = None
        if found is not self and getattr(found, "function", None) is not self.function:
            raise pickle.PicklingError(f"{spec} does not name this agent at module level")
        return find_attribute, (spec,)


def find_attribute(spec: str) -> Any:
    """`package.module:name.attr` -> that object (imported)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"agent {spec!r} must look like package.module:name")
    target: Any = _import(module_name)
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AttributeError(f"{module_name} has no {attribute!r} (agent {spec!r})") from None
    return target


class AgentImportError(ImportError):
    """The agent's module exists but importing it failed (its own import of something else, a syntax error, ...)."""


def _import(module_name: str) -> Any:
    """The module; when it is there but its import fails, an `AgentImportError` with the real cause."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        parts = module_name.split(".")
        if exc.name in {".".join(parts[:end]) for end in range(1, len(parts) + 1)}:
            raise ModuleNotFoundError(f"no module named {module_name!r} (is its folder on the path?)") from None
        raise AgentImportError(f"importing {module_name} failed: {exc} (raised while importing it)") from exc
    except ImportError as exc:
        raise AgentImportError(f"importing {module_name} failed: {exc}") from exc
    except Exception as exc:  # a syntax error, an exception at its import time
        raise AgentImportError(f"importing {module_name} failed: {type(exc).__name__}: {exc}") from exc


def rollout(function: Callable[..., Any]) -> FunctionAgent:
    """Decorator: a plain (sync or async) function becomes an agent the Trainer can run."""
    return FunctionAgent(function)


def llm_rollout(function: Callable[..., Any]) -> FunctionAgent:
    """`@rollout` for a function that must take the LLM: `(task, llm[, rollout])` (Agent Lightning's form)."""
    return FunctionAgent(function, require_llm=True)
