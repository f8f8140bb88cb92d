"""`--model NAME|PATH`, resolved the same way by every command and script that takes a model: a name this package
builds (`smollm2`: SmolLM2-135M-Instruct, `lightning_otel.models.smollm2`) or a Hugging Face folder.

    folder = lightning_otel.model_folder("smollm2")      # built once, cached; or model_folder("path/to/folder")
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lightning_otel.models.smollm2 import smollm2

# name -> what builds its folder (and returns it)
NAMED: dict[str, Callable[[], Path]] = {"smollm2": smollm2}


def model_folder(model: str | Path) -> Path:
    """The folder of `model`: a name in `NAMED` (built on first use), else the path itself, which must hold a model
    (a `config.json`): a missing folder is said here, in one line, not in a loader's traceback later."""
    if isinstance(model, str) and model in NAMED:
        return NAMED[model]()
    folder = Path(model)
    if not (folder / "config.json").exists():
        names = ", ".join(sorted(NAMED))
        raise FileNotFoundError(f"{model!r} is neither a model name ({names}) nor a folder with a config.json")
    return folder


def is_named(model: str | Path) -> bool:
    return isinstance(model, str) and model in NAMED


__all__ = ["NAMED", "is_named", "model_folder"]
