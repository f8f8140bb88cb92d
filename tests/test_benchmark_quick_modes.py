"""Benchmarks cannot rot unseen: each one's `--quick` mode (tiny sizes, seconds) runs here, as a reader would run it
(`python -m benchmarks.NAME --quick`), and must exit 0 and print its comparison. A benchmark exits non-zero when
what it measured is not a measurement (rollouts lost, nothing exported, steps missing), so that fails here too.
The benchmarks of speed and the front door's run in tests/test_benchmark_quick_modes_of_speed.py (a file of its own,
so the suite's two workers share the quick runs); the ones that need verl or LangChain run in the verl lane
(tests/verl_lane/test_benchmark_quick_modes.py); scale_out's and chaos's beside the multi-node test
(tests/collector/test_multi_node_training.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import run_benchmark_quick
from tests.test_benchmark_quick_modes_of_speed import HERE as OF_SPEED

ROOT = Path(__file__).resolve().parents[1]

# benchmark -> what its output must have (the comparison it exists to print)
HERE: dict[str, tuple[str, ...]] = {
    "credit_assignment": ("pooled grpo: final success", "pooled anchor: final success", "gain anchor - grpo"),
    "dpo_learning": ("dpo: val reward change pooled",),
    "calculator_probe": ("called the calculator in", "answered right"),
    "frozen_lake": (
        "grpo: gain after - before",
        "anchor: gain after - before",
        "gain anchor - grpo",
        "gain refill - grpo_equal",
        "gain distill - grpo",
        "teacher check, teacher",
        "grpo seed 0: step 1 of 1, training reward",
    ),
    "sql_agent_probe": ("execution accuracy", "outcomes"),
    "calculator_learning": ("grpo: gain after grpo - warm start", "gain distill-alone - grpo", "untrained:"),
    "sql_learning": ("gain after training - warm start", "untrained:"),
    "apo_room_selector": ("seed prompt",),  # the tiny model's edits are refused: "searched nothing" (or a best)
    "apo_prompt_ceiling": ("strict score", "show the call and the rule"),
    "policy_per_agent": ("pooled shared: final success", "pooled per_agent: final success", "gain per_agent - shared"),
}
IN_THE_VERL_LANE = ("verl_step_time", "agent_build_per_rollout")
# scale_out's starts a Ray: beside the multi-node test, in its file (one worker: never two Ray clusters at once, which
# `ray.init()` could join), and off this file's worker
WITH_THE_MULTI_NODE_TEST = ("scale_out", "chaos")


def test_every_benchmark_has_its_quick_run_in_a_test() -> None:
    benchmarks = {path.stem for path in (ROOT / "benchmarks").glob("*.py") if not path.stem.startswith("_")}
    assert benchmarks == set(HERE) | set(OF_SPEED) | set(IN_THE_VERL_LANE) | set(WITH_THE_MULTI_NODE_TEST)
    verl_lane = (ROOT / "tests" / "verl_lane" / "test_benchmark_quick_modes.py").read_text()
    assert all(f'"{name}"' in verl_lane for name in IN_THE_VERL_LANE)
    multi_node = (ROOT / "tests" / "collector" / "test_multi_node_training.py").read_text()
    assert all(f'"{name}"' in multi_node for name in WITH_THE_MULTI_NODE_TEST)


@pytest.mark.parametrize("name", sorted(HERE))
def test_quick_mode_runs_and_prints_its_comparison(name: str) -> None:
    run_benchmark_quick(ROOT, name, HERE[name], timeout=300)


def test_benchmarks_are_modules_that_neither_edit_sys_path_nor_import_the_tests() -> None:
    """`python -m benchmarks.NAME` from the checkout: what benchmarks share with the tests is in
    lightning_otel.testing, an example's modules come through `import_from_folder`."""
    offenders = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        text = path.read_text()
        if re.search(r"\bsys\.path\b", text):
            offenders.append(f"{path.name}: edits sys.path")
        if re.search(r"^\s*(from tests[. ]|import tests\b)", text, re.MULTILINE):
            offenders.append(f"{path.name}: imports tests/")
    assert not offenders, offenders
