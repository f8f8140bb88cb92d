"""The README's first two commands are the ones CI runs."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("```bash") + 1
    return [line.split("#")[0].strip() for line in lines[start : start + 2]]


def test_ci_runs_the_readme_commands():
    setup, tests = readme_commands()
    assert "pip install" in setup and "pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert setup in ci
    assert tests in ci
