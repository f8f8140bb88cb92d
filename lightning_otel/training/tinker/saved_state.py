"""When a local engine's saved state is whole. A trainer killed while it saves (SIGKILL, OOM, a lost node) leaves a
step's folder with some of its files; resuming from it failed on a truncated file (the chaos run found it). A state
is whole once its `engine_state.json` is there: it is removed before the other files are rewritten and written last,
atomically (a temporary file renamed over it)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

STATE_FILE = "engine_state.json"


def begin_state(folder: Path) -> None:
    """Before a state is (re)written in `folder`: it no longer counts as whole until `end_state`."""
    (folder / STATE_FILE).unlink(missing_ok=True)


def end_state(folder: Path, state: dict[str, Any]) -> None:
    """The last file of a state: written to a temporary name and renamed, so it is there whole or not at all."""
    partial = folder / f".{STATE_FILE}.partial"
    partial.write_text(json.dumps(state))
    os.replace(partial, folder / STATE_FILE)


def state_complete(folder: Path) -> bool:
    """`folder` holds a whole local-engine state (its last file written)."""
    return (folder / STATE_FILE).is_file()


__all__ = ["STATE_FILE", "begin_state", "end_state", "state_complete"]
