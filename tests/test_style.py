"""The code stays ruff-clean (lint and format), as docs/development.md tells contributors to check, and the commands
its docstrings show paste as shown."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean() -> None:
    pytest.importorskip("ruff", reason="the main environment checks style (the lanes' environments have no ruff)")
    for command in (
        [sys.executable, "-m", "ruff", "check", "."],
        [sys.executable, "-m", "ruff", "format", "--check", "."],
    ):
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


def _docstring_sources(path: Path) -> list[tuple[int, str]]:
    """Each docstring of the file as its source text (not its value), with its line."""
    source = path.read_text(encoding="utf-8")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.append((first.lineno, ast.get_source_segment(source, value) or ""))
    return found


def test_a_command_shown_in_a_docstring_keeps_its_line_break() -> None:
    """A shell command continued with a lone backslash in a plain docstring loses the backslash and the line break:
    `--help` (the docstring as the description) then prints one joined line the reader cannot paste as shown."""
    lone_backslash_at_line_end = re.compile(r"(?<!\\)(?:\\\\)*\\\n")
    bad = []
    for folder in ("lightning_otel", "benchmarks", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, text in _docstring_sources(path):
                if text[:1] not in "rR" and lone_backslash_at_line_end.search(text):
                    bad.append(f"{path.relative_to(ROOT)}:{line}")
    assert not bad, "write `\\\\` (or a raw docstring) where a docstring's command goes on: " + ", ".join(bad)
