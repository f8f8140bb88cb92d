"""The wrappers one instrumentor applied to other libraries: wrap each target once, remember it, unwrap them all.

patches = Patches()
patches.wrap(module, "SyncAPIClient.request", wrapper)   # wrapt's function wrapper; a second call is a no-op
patches.unwrap_all()                                     # what `_uninstrument` does: every attribute restored
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.instrumentation.utils import unwrap
from wrapt import wrap_function_wrapper


class Patches:
    def __init__(self) -> None:
        self._applied: list[tuple[Any, str]] = []

    def wrap(self, module: Any, attribute: str, wrapper: Callable[..., Any]) -> bool:
        """Wrap `module.attribute` (`"function"` or `"Class.method"`) unless it is missing or already ours."""
        *path, name = attribute.split(".")
        owner = module
        for part in path:
            owner = getattr(owner, part, None)
        if owner is None or not hasattr(owner, name) or self.wrapped(owner, name):
            return False
        wrap_function_wrapper(module, attribute, wrapper)
        self._applied.append((owner, name))
        return True

    def wrapped(self, owner: Any, name: str | None = None) -> bool:
        """Whether we wrapped `owner.name` (any attribute of `owner` when `name` is None)."""
        return any(o is owner and (name is None or n == name) for o, n in self._applied)

    def unwrap_all(self) -> None:
        for owner, name in reversed(self._applied):
            unwrap(owner, name)
        self._applied.clear()
