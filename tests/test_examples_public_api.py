"""Examples are what users copy: they import lightning-otel only through its public faces, by names those faces
offer (`lightning_otel`, `lightning_otel.testing`, `lightning_otel.collector`, and `lightning_otel.auto`)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FACES = ("lightning_otel", "lightning_otel.testing", "lightning_otel.collector")
WHOLE_MODULES = ("lightning_otel.auto",)  # imported for its effect, no names taken


def our_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None for `import module`) of every lightning_otel import in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lightning_otel"):
            found += [(node.lineno, node.module or "", alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, alias.name, None) for alias in node.names if alias.name.startswith("lightning_otel")
            ]
    return found


def test_examples_import_only_public_names() -> None:
    public = {face: set(importlib.import_module(face).__all__) for face in FACES}
    wrong = []
    for path in sorted((ROOT / "examples").rglob("*.py")):
        for line, module, name in our_imports(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if name is None:
                if module not in FACES + WHOLE_MODULES:
                    wrong.append(f"{where}: import {module}")
            elif module not in FACES or name not in public[module]:
                wrong.append(f"{where}: from {module} import {name}")
    assert not wrong, "examples importing non-public names:\n" + "\n".join(wrong)


def test_the_check_sees_a_private_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from lightning_otel.runner.runner_process import run_runner_processes\nimport lightning_otel.auto\n"
    )
    assert our_imports(probe) == [(1, "lightning_otel.runner.runner_process", "run_runner_processes"),
                                  (2, "lightning_otel.auto", None)]  # fmt: skip
