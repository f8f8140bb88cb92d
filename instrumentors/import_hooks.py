"""Patch a library when it is imported (or now, if it already is)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

import wrapt


def when_imported(module_name: str, patch: Callable[[ModuleType], None]) -> None:
    module = sys.modules.get(module_name)
    if module is not None:
        patch(module)
    else:
        wrapt.register_post_import_hook(patch, module_name)
