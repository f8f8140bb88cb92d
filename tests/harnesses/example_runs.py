"""What the harness examples' tests share: their pinned CLI installed from the lock file, and their READMEs'
commands run as written (this environment's python and lightning-otel in place of `../../.venv/bin/`)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.doc_blocks import lines_not_printed

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
_SPAN_ID = re.compile(r"\b[0-9a-f]{16}\b")


def npm_ci(example: Path, package: str, binary: str) -> Path:
    """The example's CLI, installed by `npm ci` (exactly the lock file's versions), checked to be the pinned one."""
    npm = shutil.which("npm")
    assert npm, "the harness tests need node and npm: sudo apt-get install -y nodejs npm (bash .ci/prerequisites)"
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=example, check=True, timeout=600)
    command = example / "node_modules" / ".bin" / binary
    version = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    pinned = json.loads((example / "package-lock.json").read_text())["packages"][f"node_modules/{package}"]["version"]
    assert pinned in version, (version, pinned)
    return command


def readme_block_after(example: Path, heading: str) -> tuple[str, str]:
    """The first bash block under `heading` in the example's README, and the sample output under it (or "")."""
    section = (example / "README.md").read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    command = section.split("```bash\n", 1)[1].split("```", 1)[0].strip()
    sample = section.split("```text\n", 1)[1].split("```", 1)[0] if "```text\n" in section else ""
    return command, sample


def here(argv: list[str]) -> list[str]:
    """A README's `../../.venv/bin/X ...` with this environment's X."""
    return [str(Path(sys.executable).with_name(Path(argv[0]).name)), *argv[1:]]


def check_dry_run(example: Path) -> str:
    """Run the README's dry run; its output must have the sample's shape (numbers and span ids masked)."""
    command, sample = readme_block_after(example, "## 2. A dry run")
    done = subprocess.run(here(shlex.split(command)), cwd=example, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    printed = _SPAN_ID.sub("SPAN", done.stdout)
    assert lines_not_printed(_SPAN_ID.sub("SPAN", sample), printed) == [], printed
    return done.stdout


def run_training(example: Path, work: Path, *overrides: str) -> list[dict[str, Any]]:
    """Run the README's training command (with `overrides` after it) and return each step's metrics."""
    command, _ = readme_block_after(example, "## 3. Train")
    run = work / "run"  # the run folder: its metrics.jsonl, train.log, model
    argv = [*here(shlex.split(command)), *overrides, "--run-dir", str(run)]
    done = subprocess.run(argv, cwd=example, capture_output=True, text=True, timeout=1200)
    log = (run / "train.log").read_text()[-3000:] if (run / "train.log").exists() else ""
    assert done.returncode == 0, done.stdout + done.stderr + log  # no held-out tasks: no verdict, exit 0
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
