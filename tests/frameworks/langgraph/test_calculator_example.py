"""examples/calculator as its README runs it: the dry run sends LangGraph's prebuilt ReAct agent through the policy
gateway to a scripted teacher that calls the calculator; every problem gives the agent's two calls as samples (the
call that asks for the tool, the call that reads its answer), with the server's token ids, and the right answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "calculator"
sys.path.insert(0, str(EXAMPLE))
from calculator_agent import calculate, final_number, word_problems  # noqa: E402


def test_the_calculator_and_the_answer_reader() -> None:
    assert calculate.invoke({"expression": "17 * 24"}) == "408"
    assert calculate.invoke({"expression": "(120 + 35) - 8"}) == "147"
    assert calculate.invoke({"expression": "__import__('os')"}).startswith("error:")
    assert final_number("17 * 24 = 408, so 408 pencils.") == 408
    assert final_number("It is 1,010 trees") == 1010 and final_number("no idea") is None
    problems = word_problems(50, seed=3)
    assert problems == word_problems(50, seed=3) and len({p["question"] for p in problems}) == 50
    # the expression a teacher's context may name computes the answer
    assert all(calculate.invoke({"expression": p["expression"]}) == str(p["answer"]) for p in problems)


def test_dryrun_samples_the_agents_calls_with_token_ids() -> None:
    done = subprocess.run([sys.executable, "train_calculator.py", "dryrun"], cwd=EXAMPLE, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "dry run: 4 problems, mean reward 1.00, 8 samples from agents ['agent']" in done.stdout
    assert "agents seen ['agent']" in done.stdout and "without token ids 0" in done.stdout
