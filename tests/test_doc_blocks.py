"""Docs as code: every block of README.md and docs/ runs as written, in a folder like a fresh clone after README
command 1, or its page says why not (tests/doc_blocks.py has the rules); sample output on a page is checked against
a run's. A broken block fails here: a misspelled flag, a bare command the shell cannot find, an unmarked block."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from lightning_otel import semconv
from lightning_otel.collector import Client, EmbeddedCollector
from tests.doc_blocks import EXAMPLE_READMES, PAGES, ROOT, Block, blocks, lines_not_printed, problems

VENV = Path(sys.prefix)
DEMO_STEPS = 2  # the pages' demo runs 40 steps; two make the same store, with the same fields


@dataclass
class Ran:
    block: Block
    returncode: int
    output: str


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """README command 1's demo, shorter: its folder and what it printed."""
    folder = fresh_clone(tmp_path_factory.mktemp("demo") / "clone", None)
    done = subprocess.run(
        ["bash", "-c", f".venv/bin/lightning-otel demo --steps {DEMO_STEPS}"],
        cwd=folder, capture_output=True, text=True, timeout=600, env=shell_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return folder / "agl-demo", done.stdout


def shell_env() -> dict[str, str]:
    """The newcomer's shell: this environment's bin/ is not on PATH (commands name .venv/bin/ as the pages do)."""
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(
        part for part in env.get("PATH", "").split(os.pathsep) if part and not part.startswith(str(VENV))
    )
    return env


def fresh_clone(folder: Path, demo_dir: Path | None) -> Path:
    """A folder as a fresh clone is after README command 1: .venv, the demo's folder, the examples, benchmarks."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".venv").symlink_to(VENV)
    for name in ("examples", "benchmarks", "constraints.txt"):
        (folder / name).symlink_to(ROOT / name)
    if demo_dir is not None:
        shutil.copytree(demo_dir, folder / "agl-demo")
    return folder


def run_block(block: Block, folder: Path, timeout_s: float = 300) -> Ran:
    if block.language == "bash":
        command = ["bash", "-e", "-o", "pipefail", "-c", block.text]
    else:
        script = folder / f"doc_block_{block.line}.py"
        script.write_text(block.text)
        command = [str(folder / ".venv" / "bin" / "python"), script.name]
    process = subprocess.Popen(command, cwd=folder, env=shell_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        output = f"(timed out after {timeout_s:.0f} s)"
    finally:
        with contextlib.suppress(ProcessLookupError):  # what the block left running (a collector started with `&`)
            os.killpg(process.pid, signal.SIGTERM)
        process.wait()
    return Ran(block, process.returncode, output)


def run_page(page: Path, folder: Path, demo_output: str = "") -> list[str]:
    """Run a page's blocks in order in `folder`; what failed, with the output that says why."""
    failures: list[str] = []
    last: Ran | None = None
    for block in blocks(page):
        failures += problems(block)
        if block.is_output:
            printed = demo_output if block.marker == "output of the demo" else (last.output if last else "")
            for line in lines_not_printed(block.text, printed):
                failures.append(f"{block.where}: the sample line {line!r} is not what the run printed")
        elif block.runs_here:
            last = run_block(block, folder)
            if last.returncode != 0:
                failures.append(f"{block.where}: exit {last.returncode}\n{block.text}---\n{last.output[-3000:]}")
    return failures


PAGES_THAT_RUN = [page for page in PAGES if any(block.runs_here for block in blocks(page))]


def test_every_block_is_run_or_placed() -> None:
    wrong = [problem for page in PAGES for block in blocks(page) for problem in problems(block)]
    assert not wrong, "\n".join(wrong)


def test_every_block_of_the_examples_readmes_is_placed() -> None:
    """The examples' READMEs (included in docs/examples/) run in their lanes' environments: their bash commands are
    placed in tests/doc_commands.py (tests/test_docs.py), every other block by a marker."""
    wrong = []
    for page in EXAMPLE_READMES:
        for block in blocks(page):
            if block.language == "bash" and not block.marker:
                continue
            if block.runs_here:
                wrong.append(f"{block.where}: an example's {block.language} block is not run here: mark it")
            wrong += problems(block)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("page", PAGES_THAT_RUN, ids=lambda page: str(page.relative_to(ROOT)))
def test_the_pages_blocks_run_as_written(page: Path, demo: tuple[Path, str], tmp_path: Path) -> None:
    failures = run_page(page, fresh_clone(tmp_path / "clone", demo[0]), demo[1])
    assert not failures, "\n\n".join(failures)


def test_the_demos_sample_output_is_what_it_prints(demo: tuple[Path, str]) -> None:
    samples = [block for page in PAGES for block in blocks(page) if block.marker == "output of the demo"]
    assert samples, "getting-started shows the demo's output"
    for block in samples:
        assert not lines_not_printed(block.text, demo[1]), (block.where, demo[1])


def test_a_broken_block_fails(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\n.venv/bin/lightning-otel export --shapee pairs a.sqlite3 out.jsonl\n```\n\n"
        "```bash\nlightning-otel --help\n```\n\n"  # bare: not on the newcomer's PATH
        "```python\nimport lightning_otel as agl\nprint(agl.Trainer(n_runnerz=1))\n```\n\n"
        "```text\nstep 1: reward 0.5\n```\n\n"
        "<!-- docs: output of the block above -->\n```text\nstep 1: reward 0.5  ok 4\n```\n"
    )  # fmt: skip
    failures = run_page(page, fresh_clone(tmp_path / "clone", None))
    assert any(":1: exit 2" in failure and "--shapee" in failure for failure in failures), failures
    assert any(":5: exit 127" in failure for failure in failures), failures
    assert any(":9: exit 1" in failure and "n_runnerz" in failure for failure in failures), failures
    assert any(":14: a text block cannot run here" in failure for failure in failures), failures
    assert any(":19: the sample line" in failure for failure in failures), failures


def test_the_demos_console_spans_export_and_view_agree_on_every_steps_version(
    demo: tuple[Path, str], tmp_path: Path
) -> None:
    """One policy version count, as a user meets it: the short synchronous demo above (VERL on CPU), then the four
    places a version shows read back, which agree on every step: the console's `policy v`, every LLM span's
    `agl.llm.policy_version` and each rollout's queued version in the store, `lightning-otel export --shape
    rollouts`, and the rollout view (/ui). Step k samples with the weights published after step k-1: version k-1.
    Here to share the demo's run with the pages (this file is one worker's)."""
    folder, printed = shutil.copytree(demo[0], tmp_path / "agl-demo"), demo[1]  # the pages' copy stays as it was
    console = {int(step): int(version) for step, version in re.findall(r"step (\d+): .*policy v (\d+)", printed)}
    assert console == {step: step - 1 for step in range(1, DEMO_STEPS + 1)}, printed
    store = folder / "collector.sqlite3"
    exported = tmp_path / "rollouts.jsonl"
    export = [sys.executable, "-m", "lightning_otel.cli", "export", str(store), str(exported), "--shape", "rollouts"]
    ran = subprocess.run(export, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    by_export = {row["rollout_id"]: row for row in rows if row["mode"] == "train"}

    with EmbeddedCollector.on_sqlite_file(store) as addresses, Client(addresses.query) as client:
        train = [r for r in client.queued_rollouts(limit=1000) if r["mode"] == "train"]
        assert len(train) == DEMO_STEPS * 16 and len(by_export) == len(train)
        spans = client.rollouts_spans([r["rollout_id"] for r in train], latest=True)
        (run,) = httpx.get(f"{addresses.query}/v1/ui/runs").json()["runs"]
        view = {step: httpx.get(f"{addresses.query}/v1/ui/runs/{run['run_id']}/train/{step}").json()
                for step in range(1, DEMO_STEPS + 1)}  # fmt: skip
    for record in train:
        step, rollout_id = record["metadata"]["step"], record["rollout_id"]
        expected = console[step]
        assert record["metadata"]["policy_version"] == expected  # queued under
        sampled = {s["attributes"].get(semconv.AGL_POLICY_VERSION) for s in spans[rollout_id]
                   if semconv.AGL_RESPONSE_TOKEN_IDS in s["attributes"]}  # fmt: skip
        assert sampled == {expected}, (step, sampled)  # sampled by: the client's and the gateway's spans
        row = by_export[rollout_id]
        assert row["policy_version"] == expected and {c["policy_version"] for c in row["calls"]} == {expected}
    for step, page in view.items():
        assert {r["policy_version"] for r in page["rollouts"]} == {console[step]}
        assert page["sampled_versions"] == {str(console[step]): len(page["rollouts"])}
        assert page["trainer_metrics"]["training/policy_version"] == console[step]
