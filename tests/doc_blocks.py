"""The code blocks of README.md and docs/, and what each page's source says of them.

A block runs as written (tests/test_doc_blocks.py) unless the line before its fence says otherwise, in an HTML
comment the site does not show:

    <!-- docs: not run: a GPU with vLLM -->                          why it cannot run here
    <!-- docs: runs in tests/test_x.py::test_y -->                    a test in another lane runs it (`;` for more)
    <!-- docs: output of the block above -->                          sample output, checked against that run's
    <!-- docs: output of the demo -->                                 ... against README command 1's demo (shorter)
    <!-- docs: after the block above -->                              runs after it in the same folder (the default;
                                                                      says a block needs the one before it)

Blocks run in one scratch folder per page that looks like a fresh clone after README command 1: `.venv` (this
environment), `agl-demo/` (a short `lightning-otel demo` run), `examples/` and `benchmarks/`. Bash blocks run with
`set -e` and no `.venv/bin` on PATH (a bare `lightning-otel` fails, as in the shell getting-started leaves you in);
Python blocks run as a script with `.venv/bin/python` (`if __name__ == "__main__":` works: runners can import it).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# included in docs/examples/ (their commands need the lanes' environments: tests/doc_commands.py places them)
EXAMPLE_READMES = sorted((ROOT / "examples").glob("*/README.md"))
RUNNABLE = {"bash", "python"}
_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_MARKER = re.compile(r"^<!--\s*docs:\s*(.*?)\s*-->$")
_NUMBER = re.compile(r"\d+(\.\d+)?")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    marker: str  # what the comment before the fence says, "" when none

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page.name
        return f"{page}:{self.line}"

    @property
    def not_run_reason(self) -> str | None:
        return self.marker.split(":", 1)[1].strip() if self.marker.startswith("not run:") else None

    @property
    def runs_in(self) -> list[str]:
        if not self.marker.startswith("runs in "):
            return []
        return [target.strip() for target in self.marker.removeprefix("runs in ").split(";") if target.strip()]

    @property
    def is_output(self) -> bool:
        return self.marker in ("output of the block above", "output of the demo")

    @property
    def runs_here(self) -> bool:
        return self.language in RUNNABLE and self.marker in ("", "after the block above")


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, in order, with the marker on the nearest line above each fence."""
    lines = page.read_text().splitlines()
    found, index = [], 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        indent, end = len(fence.group(1)), index + 1
        while not lines[end].strip().startswith("```"):
            end += 1
        above = next((line.strip() for line in reversed(lines[:index]) if line.strip()), "")
        marker = _MARKER.match(above)
        text = "\n".join(line[indent:] for line in lines[index + 1 : end])
        found.append(Block(page, index + 1, fence.group(2), text + "\n", marker.group(1) if marker else ""))
        index = end + 1
    return found


def problems(block: Block) -> list[str]:
    """What is wrong with how the page places a block (nothing for a block that runs here)."""
    if block.runs_here or block.is_output:
        return []
    if block.marker.startswith("not run:"):
        return [] if len(block.not_run_reason or "") >= 10 else [f"{block.where}: say why it is not run"]
    if block.runs_in:
        return [f"{block.where}: {target} does not exist" for target in block.runs_in if not target_exists(target)]
    if block.marker:
        return [f"{block.where}: unknown marker {block.marker!r}"]
    return [f"{block.where}: a {block.language or 'plain'} block cannot run here: mark it (`not run: why`, "
            "`runs in <test>` or `output of the block above`)"]  # fmt: skip


def target_exists(target: str) -> bool:
    """`.ci/run`, or `tests/file.py::test_name` naming a test function that exists."""
    if target == ".ci/run":
        return True
    file, _, name = target.partition("::")
    source = ROOT / file
    if not source.is_file() or not name:
        return False
    return name in {node.name for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.FunctionDef)}


def shape(line: str) -> str:
    """A line with its numbers masked and its spaces collapsed: sample output and a run's agree on shape."""
    return re.sub(r"\s+", " ", _NUMBER.sub("N", line)).strip()


def lines_not_printed(sample: str, printed: str) -> list[str]:
    """The sample's lines (bar `...`) that no line the run printed has the shape of."""
    shapes = {shape(line) for line in printed.splitlines()}
    return [line for line in sample.splitlines() if line.strip() not in ("", "...") and shape(line) not in shapes]
