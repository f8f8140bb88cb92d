"""How the user invoked us, for the commands a run prints to copy."""

from __future__ import annotations

import sys


def invoked_as() -> str:
    """The program as the user typed it (`.venv/bin/lightning-otel`), for the commands a run prints to copy."""
    import shutil
    from pathlib import Path

    typed = sys.argv[0] if sys.argv else ""
    if Path(typed).name != "lightning-otel" or shutil.which("lightning-otel") == typed:
        return "lightning-otel"  # found on PATH (the shell hands a script its full path): the short name works
    return typed


__all__ = ["invoked_as"]
