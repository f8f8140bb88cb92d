"""The SQL example distills from a frozen teacher (`--distill-teacher warm`: the seed's warm start with the gold query
in its context), on the tiny model: the run keeps each step's reverse KL and says which teacher it had."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

SPIDER = Path(__file__).resolve().parents[2] / "examples" / "spider"


def test_the_sql_example_distills_from_its_frozen_warm_start(tmp_path: Path) -> None:
    command = [sys.executable, "train_sql_smollm2.py", "--quick", "--workdir", str(tmp_path), "--distill-context",
               "A correct query for this question: {query}", "--distill-teacher", "warm"]  # fmt: skip
    done = subprocess.run(command, cwd=SPIDER, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = json.loads((tmp_path / "seed-0" / "run.json").read_text())
    assert run["distill_teacher"] == "warm" and run["distill"], run
    assert all(math.isfinite(step["reverse_kl"]) for step in run["distill"])


def test_a_frozen_teacher_refuses_the_teacher_check(tmp_path: Path) -> None:
    command = [sys.executable, "train_sql_smollm2.py", "--quick", "--workdir", str(tmp_path), "--distill-context",
               "{query}", "--distill-teacher", "warm", "--teacher-check"]  # fmt: skip
    done = subprocess.run(command, cwd=SPIDER, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "run the check with self-distillation" in done.stderr
