"""The docs: the site builds strictly (a broken link or anchor fails the build), the README stays a short front page,
and every command the examples' READMEs tell a user to run is run by a test or says why it is not run here
(README.md's and docs/'s own blocks: tests/test_doc_blocks.py)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_commands import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_READMES = sorted((ROOT / "examples").glob("*/README.md"))


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the main environment builds the site (the lanes' environments lack mkdocs)")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "training" / "loop" / "index.html").exists()


def test_the_readme_is_a_short_front_page() -> None:
    """At most 120 lines, none over 160 characters, and the state of things as two tables (what works and where it
    has run; each result in a row linking its page), not prose."""
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines: move the detail to docs/"
    long = [f"{number}: {len(line)}" for number, line in enumerate(lines, 1) if len(line) > 160]
    assert not long, f"README.md lines over 160 characters (line: length): {long}"
    tables = (("## What works", "| capability | state | tested where |"),
              ("## Results", "| what | result | verdict | page |"))  # fmt: skip
    for heading, header in tables:
        section = text.split(heading, 1)[1].split("\n## ", 1)[0]
        assert header in section, f"README.md's {heading!r} section has no table headed {header!r}"


def commands(path: Path) -> list[str]:
    """The commands in a page's bash blocks: continuation lines joined, whitespace collapsed, comments dropped."""
    found = []
    for block in re.findall(r"```(?:bash|shell|sh)\n(.*?)```", path.read_text(), re.DOTALL):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"\s+#.*$", "", line.strip())
            if line and not line.startswith("#"):
                found.append(re.sub(r"\s+", " ", line))
    return found


def test_every_command_in_the_docs_runs_in_a_test_or_says_why_not() -> None:
    missing = sorted({f"{path.relative_to(ROOT)}: {command}" for path in EXAMPLE_READMES for command in commands(path)
                      if command not in COMMANDS})  # fmt: skip
    assert not missing, "commands tests/doc_commands.py does not place (a test, CI, or why not):\n" + "\n".join(missing)


def test_every_test_the_commands_table_names_exists() -> None:
    wrong = []
    for command, where in COMMANDS.items():
        if not where.startswith("not run here:"):
            file, _, name = where.partition("::")
            source = ROOT / file
            defined = source.exists() and name in {
                node.name for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.FunctionDef)
            }
            if not defined:
                wrong.append(f"{command!r}: {where} does not exist")
    assert not wrong, "\n".join(wrong)


def test_every_public_name_is_in_the_api_reference() -> None:
    """Every name `lightning_otel.__all__` lists has its entry in docs/reference.md (`__version__`, a string, is said
    on its first lines): a public name added without its entry fails (the strict docs build fails on an entry for a
    name that is gone)."""
    import lightning_otel

    entries = re.findall(r"^::: (lightning_otel\.[\w.]+)$", (ROOT / "docs" / "reference.md").read_text(), re.MULTILINE)
    documented = {entry.rsplit(".", 1)[1] for entry in entries}
    public = set(lightning_otel.__all__) - {"__version__"}
    assert not public - documented, f"public names missing from docs/reference.md: {sorted(public - documented)}"


def test_the_changelog_names_the_version_the_package_says() -> None:
    import lightning_otel

    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (\d+\.\d+\.\d+) - \d{4}-\d{2}-\d{2}$", changelog, re.MULTILINE)
    assert releases and releases[0] == lightning_otel.__version__, (releases[:3], lightning_otel.__version__)
