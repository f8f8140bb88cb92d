"""Modules from a folder of scripts (an example's, a project's that is not a package), imported as Python imports
them when it runs a script there.

    train_calculator, = import_from_folder("examples/calculator", "train_calculator")

`python examples/calculator/train_calculator.py` puts the script's folder first on `sys.path`, so the modules
there import each other by bare name (`from model_with_tools import ...`); this does the same for a program that
uses them from elsewhere (the benchmarks), once, here. Runner processes started afterwards (spawned) inherit the
path, so they import an agent of that folder by the same name.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType


def import_from_folder(folder: str | Path, *names: str) -> tuple[ModuleType, ...]:
    """The modules `names` of `folder`, its path first on `sys.path` (once) as for a script run there."""
    path = str(Path(folder).resolve())
    if not Path(path).is_dir():
        raise FileNotFoundError(f"no folder {path} to import {', '.join(names)} from")
    if path not in sys.path:
        sys.path.insert(0, path)
    return tuple(importlib.import_module(name) for name in names)


__all__ = ["import_from_folder"]
