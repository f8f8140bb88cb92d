"""The nox lanes' file lists stay true: a main-suite file the `openai3` lane leaves out as one that never builds an
OpenAI client exists and names no `openai` (one that starts to would be tested against openai 3.x again)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _no_openai_client() -> tuple[str, ...]:
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "NO_OPENAI_CLIENT" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("noxfile.py has no NO_OPENAI_CLIENT")


def test_the_openai3_lane_leaves_out_only_files_without_an_openai_client() -> None:
    names = _no_openai_client()
    assert names, "the list is empty"
    for name in names:
        path = ROOT / "tests" / f"{name}.py"
        assert path.is_file(), f"noxfile.py's NO_OPENAI_CLIENT names {name}, which is not in tests/"
        assert "openai" not in path.read_text().lower(), (
            f"{path.name} mentions openai now: take it off noxfile.py's NO_OPENAI_CLIENT so the openai3 lane runs it"
        )
