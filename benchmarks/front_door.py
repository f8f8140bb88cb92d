"""The front door, measured as a user meets it: `lightning-otel train` run as a command, nothing but what the table
says on its command line, its verdict and wall time read from the run folder it leaves.

    python -m benchmarks.front_door agents              # the agents written for issue 69, SmolLM2, defaults
    python -m benchmarks.front_door backends            # one task (the demo's), each backend with its recipe
    python -m benchmarks.front_door --quick             # tinker and dpo, the tiny model, 2 steps: that it runs (tests)

`agents`: examples/front_door's antonyms and reviews (one call, a format to keep), slogans (a LangGraph planner and
writer) and inventory (a tool-calling agent, with its warm-start examples), each `lightning-otel train --model
smollm2 --agent ... --train ... --val ... [--agent-match ...] [--warm-start ...]` and no other flag. `backends`: the
SmolLM2 demo's task (repeat a word in capitals; 20 train words, 12 held-out) with `--algorithm verl`, `tinker` and
`dpo`, each at its recipe's settings, to choose the default without a GPU by what learns most per minute. Every
run's log and the table (runs.json) are kept under --out (default benchmarks/runs/front_door); the agents' run
folders are where a user's would be, examples/front_door/runs/, the backends' beside their logs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lightning_otel.cli.train_demo import WORDS  # the demo's 20 words

ROOT = Path(__file__).resolve().parent.parent
AGENTS_DIR = ROOT / "examples" / "front_door"
DEMO_VAL = ("tickets", "accounts", "vendors", "contracts", "batches", "profits", "margins", "channels", "clients",
            "deliveries", "leads", "quotes")  # held out: none is one of the demo's words  # fmt: skip

# name -> (agent, task files' stem, extra flags the command takes); run from examples/front_door
AGENTS = {
    "antonyms": ("antonyms:antonyms", "antonyms", []),
    "slogans": ("slogans:slogans", "slogans", ["--agent-match", "writer"]),
    "inventory": ("inventory:inventory", "inventory", ["--warm-start", "tasks/inventory_warm_start.jsonl"]),
    "reviews": ("reviews:reviews", "reviews", []),  # written after round 2's antonyms, run once as it was written
}
QUICK = ["--steps", "2", "--tasks-per-step", "2", "--group-size", "2", "--val-samples", "1"]


def run_command(command: list[str], cwd: Path, run_dir: Path, log: Path) -> dict[str, Any]:
    """One `lightning-otel train`: its exit status, wall time, settings and verdict."""
    began = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - began
    verdict = _json(run_dir / "verdict.json")
    settings = _json(run_dir / "settings.json")
    return {"command": " ".join(command[1:]), "exit": done.returncode, "seconds": seconds, "run_dir": str(run_dir),
            "verdict": verdict, "plan": settings.get("plan", {}), "log": str(log)}  # fmt: skip


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def agents_suite(args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    runs = []
    for name in args.only or list(AGENTS):
        agent, stem, extra = AGENTS[name]
        # the run folder as a user's: relative, in the example's runs/ (what the closing lines then print)
        run_dir = Path("runs") / out.name / f"{name}-seed{args.seed}"
        command = [str(ROOT / ".venv/bin/lightning-otel"), "train", "--model", args.model, "--agent", agent,
                   "--train", f"tasks/{stem}_train.jsonl", "--val", f"tasks/{stem}_val.jsonl", *extra,
                   "--run-dir", str(run_dir)]  # fmt: skip
        if args.seed:
            command += ["--seed", str(args.seed)]
        if args.quick:
            command += QUICK
        print(f"{name}: {' '.join(command[1:])}", flush=True)
        log = out / f"{name}.log"
        runs.append({"name": name, "seed": args.seed, **run_command(command, AGENTS_DIR, AGENTS_DIR / run_dir, log)})
        print(f"  {row(runs[-1])}", flush=True)
    return runs


def backends_suite(args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    tasks = out / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    for split, words in (("train", WORDS), ("val", DEMO_VAL)):
        (tasks / f"{split}.jsonl").write_text("".join(json.dumps({"word": w, "say_word": True}) + "\n" for w in words))
    runs = []
    for algorithm in args.only or ["tinker", "verl", "dpo"]:
        run_dir = out / f"{algorithm}-seed{args.seed}"
        command = [str(ROOT / ".venv/bin/lightning-otel"), "train", "--model", args.model, "--algorithm", algorithm,
                   "--agent", "lightning_otel.cli.train_demo:shout_rollout", "--agent-match", "write",
                   "--train", str(tasks / "train.jsonl"), "--val", str(tasks / "val.jsonl"), "--seed", str(args.seed),
                   "--run-dir", str(run_dir)]  # fmt: skip
        if args.quick:
            command += QUICK
        print(f"{algorithm}: {' '.join(command[1:])}", flush=True)
        result = run_command(command, out, run_dir, out / f"{algorithm}.log")
        runs.append({"name": algorithm, "seed": args.seed, **result})
        print(f"  {row(runs[-1])}", flush=True)
    return runs


def row(run: dict[str, Any]) -> str:
    """before -> after (change, SE) for greedy and sampled, minutes, exit status."""
    parts = [f"{run['name']} seed {run['seed']}: exit {run['exit']}, {run['seconds'] / 60:.1f} min"]
    for comparison in run["verdict"].get("comparisons", []):
        per_minute = comparison["change"] / (run["seconds"] / 60)
        parts.append(f"{comparison['label']} {comparison['before']:.3f} ± {comparison['before_se']:.3f} -> "
                     f"{comparison['after']:.3f} ± {comparison['after_se']:.3f} ({comparison['change']:+.3f}, "
                     f"{comparison['standard_errors']:+.1f} SE, {per_minute:+.4f}/min)")  # fmt: skip
    if not run["verdict"].get("comparisons"):
        parts.append("no verdict")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", nargs="?", choices=["agents", "backends"], default="backends")
    parser.add_argument("--only", nargs="+", help=f"agents ({', '.join(AGENTS)}) or backends to run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "runs" / "front_door")
    parser.add_argument("--quick", action="store_true", help="the tiny model, 2 steps of 2 tasks x 2: that it runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.model = "tiny"
        # verl's `train --ci-fast` runs in the verl lane (tests/verl_lane); two backends show the table is made
        args.only = args.only or (["tinker", "dpo"] if args.suite == "backends" else None)
    out = args.out.resolve() / f"{args.suite}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    runs = agents_suite(args, out) if args.suite == "agents" else backends_suite(args, out)
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    print("\n" + "\n".join(row(run) for run in runs))
    print(f"every run: {out}")
    failed = [run["name"] for run in runs if run["exit"] not in (0, 3)]  # 3: trained, not improved (said above)
    if failed:
        print(f"front door: FAILED: {', '.join(failed)} did not train (their logs are in {out})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
