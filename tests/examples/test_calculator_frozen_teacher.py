"""The calculator example distills from a frozen teacher (`--distill-teacher warm`: the seed's warm start with the
problem's expression and answer in its context), on the tiny model, in the main environment (torch and the Tinker
backend; the LangGraph lane has neither)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calculator"


def test_a_frozen_teacher_distills_from_the_warm_start(tmp_path: Path) -> None:
    """The run says which teacher it had, is kept under its arm's name and keeps each step's reverse KL."""
    context = "For this problem, call the calculate tool with {expression}; the answer is {answer}."
    command = [sys.executable, "train_calculator.py", "train", "--quick", "--workdir", str(tmp_path),
               "--distill-context", context, "--distill-teacher", "warm", "--distill-alone"]  # fmt: skip
    done = subprocess.run(command, cwd=EXAMPLE, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "distilled from a frozen teacher (weight 1, alone)" in done.stdout
    run = json.loads((tmp_path / "seed-0" / "run-distill-frozen-alone.json").read_text())
    assert run["arm"] == "distill-frozen-alone" and run["distill_teacher"] == "warm"
    assert len(run["reverse_kl"]) == 1 and math.isfinite(run["reverse_kl"][0])


def test_a_frozen_teacher_refuses_the_teacher_check(tmp_path: Path) -> None:
    command = [sys.executable, "train_calculator.py", "train", "--quick", "--workdir", str(tmp_path),
               "--distill-context", "{answer}", "--distill-teacher", "warm", "--teacher-check"]  # fmt: skip
    done = subprocess.run(command, cwd=EXAMPLE, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "run the check with self-distillation" in done.stderr
