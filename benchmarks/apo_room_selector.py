"""APO on Agent Lightning's room-selector tutorial (examples/apo, run unchanged) with SmolLM2-135M-Instruct as the
agent's model, and as APO's critique and edit models: does prompt optimisation find a better prompt for a 135M
model, as a user with no hosted model would run it?

    python -m benchmarks.apo_room_selector --seeds 0 --workdir runs/apo --out runs/apo.json   # SmolLM2, ~1 h a seed
    python -m benchmarks.apo_room_selector --seeds 0 --warm-start 32 --workdir runs/apo-warm   # the agent warm-started
    python -m benchmarks.apo_room_selector --quick                            # the tiny model (tests)

The tutorial's script (`room_selector_apo.py`: APO with the tutorial's arguments, 8 train and 8 validation tasks)
talks to one OpenAI-compatible endpoint, as the tutorial's reader's does. Here that endpoint routes by model name:
the judge's model (`ROOM_SELECTOR_JUDGE_MODEL`) is a scripted strict grader, since SmolLM2 cannot fill the
judge's JSON schema (our replicas have no guided decoding): 1 when the final answer names the expected room and no
other (for "No Room": names none and says no room), else 0; every other model name (the agent's, APO's critique
and edit models) is SmolLM2, served as vLLM would serve it (its ChatML template with tools, the hermes tool-call
parser; replies of at most `--max-tokens`), sampled with each request's own temperature (the agent's 0, APO's
edits at its diversity temperature 1) from the replica's seed. Reported per seed: the seed prompt's validation
score, the best prompt's (chosen on those same 8 validation tasks, so it is an optimistic estimate), how many
candidates were proposed and tried, rollouts, wall time, and the best prompt itself. A run in which every edit was
refused (APO's `NothingTrained`: no candidate but the seed ran) is reported as "searched nothing", with the seed's
score, and is not a measurement (exit 1; `--quick` allows it, the tiny model's edits are gibberish).

`--warm-start DRILLS` first fine-tunes the agent's model on the tool's format (`benchmarks/_rooms.py`: generated
drills in the tutorial's format, none a tutorial task, answered by a scripted teacher that calls the tool and names the
room the tutorial's rule picks; SFT on the right ones), then serves it for the agent's model name only: APO's critique
and edit models stay the base SmolLM2. The quick mode warm-starts on 4 drills.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning_otel as agl
from benchmarks._rooms import room_drills, strict_score, warm_start
from benchmarks._seeded_runs import finish
from lightning_otel.agent_api.script_folder import import_from_folder
from lightning_otel.serving.cpu_replica import serve_folder
from lightning_otel.testing import OpenAITestServer, Reply, ToolCall
from lightning_otel.testing.tiny_model import model_or_tiny

ROOT = Path(__file__).resolve().parents[1]
(model_with_tools,) = import_from_folder(ROOT / "examples" / "calculator", "model_with_tools")
(room_selector,) = import_from_folder(ROOT / "examples" / "apo", "room_selector")
with_tools_template = model_with_tools.with_tools_template

JUDGE = "strict-exact-judge"
AGENT = "smollm2"
JUDGE_PROMPT = re.compile(r"Task output:\n(.*?)\n\nExpected room:\n(.*?)\n", re.S)


def router(replica_url: str, max_tokens: int, agent_url: str | None = None) -> Any:
    """The endpoint's replies: the scripted judge for its model, SmolLM2's own answer (text or tool calls) for the
    rest; the agent's model from `agent_url` where it is given (a warm-started agent; APO's models stay the base)."""
    import httpx

    client = httpx.Client(base_url=replica_url, timeout=900)
    agent_client = httpx.Client(base_url=agent_url, timeout=900) if agent_url else client

    def reply(body: dict[str, Any]) -> str | Reply:
        if body.get("model") == JUDGE:
            found = JUDGE_PROMPT.search(str(body["messages"][-1]["content"]))
            output, expected = (found.group(1), found.group(2).strip()) if found else ("", "?")
            score = strict_score(output, expected)
            return json.dumps({"reason": "names the expected room only" if score else "does not", "score": score})
        forwarded = {key: value for key, value in body.items() if key not in ("response_format", "stream")}
        forwarded.update(model="agl-policy", max_tokens=min(int(body.get("max_tokens") or max_tokens), max_tokens))
        served_by = agent_client if body.get("model") == AGENT else client
        answer = served_by.post("/chat/completions", json=forwarded).raise_for_status().json()["choices"][0]["message"]
        calls = [ToolCall(call["function"]["name"], call["function"]["arguments"], call["id"])
                 for call in answer.get("tool_calls") or []]  # fmt: skip
        return Reply(content=answer.get("content"), tool_calls=calls)

    return reply


def warm_agent(folder: Path, seed: int, args: argparse.Namespace, work: Path) -> tuple[Path, dict[str, Any]]:
    """The agent's model after the warm start on `args.warm_start` drills, and what it did."""
    drills = room_drills(args.warm_start, seed=seed + 500, avoid=room_selector.load_room_tasks())
    started = time.monotonic()
    with agl.quiet(work / "warm_start.log"):
        sft = warm_start(folder, drills, work / "model-warm", seed=seed)
    figures = {"drills": len(drills), "examples": sft.final.get("sft/examples"), "seconds": time.monotonic() - started}
    if not figures["examples"]:
        raise SystemExit(f"the warm start kept no example from {len(drills)} drills: see {work / 'warm_start.log'}")
    return work / "model-warm", figures


def one_run(seed: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    folder = with_tools_template(model_or_tiny(args.model, workdir, seed=seed), workdir)
    work = workdir / f"apo-{seed}"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(ROOT / "examples" / "apo", work, ignore=shutil.ignore_patterns("apo-out", "__pycache__"))
    warm, warmed = warm_agent(folder, seed, args, work) if args.warm_start else (None, None)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        replica = stack.enter_context(serve_folder(folder, seed=seed))
        agent_replica = stack.enter_context(serve_folder(warm, seed=seed)) if warm else None
        api = stack.enter_context(OpenAITestServer(replies=router(replica, args.max_tokens, agent_replica)))
        env = {**os.environ, "OPENAI_BASE_URL": api.base_url, "OPENAI_API_KEY": "unused", "PYTHONPATH": str(ROOT),
               "ROOM_SELECTOR_MODEL": AGENT, "ROOM_SELECTOR_JUDGE_MODEL": JUDGE}  # fmt: skip
        try:
            done = subprocess.run([sys.executable, "room_selector_apo.py"], cwd=work, env=env, capture_output=True,
                                  text=True, timeout=args.timeout)  # fmt: skip
        except subprocess.TimeoutExpired as exc:  # a failed run, reported with its log (the store stays in --workdir)
            output = [part.decode() if isinstance(part, bytes) else part or "" for part in (exc.stdout, exc.stderr)]
            done = subprocess.CompletedProcess(
                exc.cmd, -1, output[0], output[1] + f"\ntimed out after {exc.timeout:g} s"
            )
        requests = len(api.requests)
    (work / "apo.log").write_text(done.stdout + done.stderr)
    run: dict[str, Any] = {"seed": seed, "model": args.model, "returncode": done.returncode, "requests": requests,
                           "seconds": time.monotonic() - started, "workdir": str(work),
                           "warm_start": warmed}  # fmt: skip
    history_file = work / "apo-out" / "history.json"
    searched_nothing = re.search(r"APO tried no prompt but the seed.*", done.stderr)
    if searched_nothing and history_file.exists():  # every edit refused: the seed's score and the edits, reported
        history = json.loads(history_file.read_text())
        seed_prompt = history["candidates"][0]
        run.update(
            searched_nothing=searched_nothing.group(0),
            seed_val=seed_prompt.get("val_score"),
            refused=[c.get("rejected_because") for c in history["candidates"] if c.get("rejected_because")],
        )
        return run
    if done.returncode != 0 or not history_file.exists():
        run["error"] = (done.stderr or done.stdout)[-2000:]
        return run
    history = json.loads(history_file.read_text())
    candidates = {candidate["label"]: candidate for candidate in history["candidates"]}
    summary = re.search(r"\((\S+), validation ([\d.]+), seed ([\d.]+); (\d+) rollouts", done.stdout)
    run.update(
        best=history["best"], best_val=float(summary.group(2)) if summary else None,
        seed_val=float(summary.group(3)) if summary else None, rollouts=int(summary.group(4)) if summary else None,
        proposed=len(candidates) - 1,
        scored=sum(1 for c in candidates.values() if c.get("val_score") is not None) - 1,
        best_prompt=(work / "apo-out" / "best_prompt.txt").read_text(),
        candidates=[{key: c.get(key) for key in ("label", "parent", "val_score", "minibatch_scores",
                                                 "rejected_because", "template")} for c in candidates.values()],
    )  # fmt: skip
    return run


def summary(runs: list[dict[str, Any]], *, nothing_searched_allowed: bool) -> tuple[list[str], bool]:
    lines = [f"{'seed':>4} {'seed prompt':>12} {'best prompt':>12} {'proposed':>9} {'scored':>7} {'rollouts':>9} "
             f"{'s':>6}"]  # fmt: skip
    complete = True
    for run in runs:
        if run.get("warm_start"):
            warmed = run["warm_start"]
            lines.append(f"{run['seed']:>4} warm start: {warmed['examples']:.0f} examples from {warmed['drills']} "
                         f"drills in {warmed['seconds']:.0f} s (the agent's model; APO's are the base)")  # fmt: skip
        if "searched_nothing" in run:  # not a measurement of APO: no candidate but the seed ran
            lines.append(f"{run['seed']:>4} seed prompt {run['seed_val']:.3f}, searched nothing in "
                         f"{run['seconds']:.0f} s: {run['searched_nothing'][:400]}")  # fmt: skip
            complete &= nothing_searched_allowed
            continue
        if "error" in run or run.get("best_val") is None:
            lines.append(f"{run['seed']:>4} failed (exit {run['returncode']}): {run.get('error', '')[-300:]}")
            complete = False
            continue
        lines.append(f"{run['seed']:>4} {run['seed_val']:>12.3f} {run['best_val']:>12.3f} {run['proposed']:>9} "
                     f"{run['scored']:>7} {run['rollouts']:>9} {run['seconds']:>6.0f}")  # fmt: skip
        lines.append(f"     best prompt ({run['best']}): {run['best_prompt'][:400]!r}")
    return lines, complete


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--model", choices=("tiny", "smollm2"), default="smollm2")
    parser.add_argument("--max-tokens", type=int, default=256, help="the longest reply SmolLM2 gives any request")
    parser.add_argument("--timeout", type=float, default=5400, help="seconds a seed's run may take")
    parser.add_argument("--out", type=Path, help="write every run's numbers here (JSON)")
    parser.add_argument(
        "--workdir", type=Path, help="keep each seed's run (store, log, history) here; default a temp dir"
    )
    parser.add_argument("--warm-start", type=int, default=0, metavar="DRILLS",
                        help="warm-start the agent's model first: SFT on this many drills a scripted teacher answers "
                             "with the tool (APO's own models stay the base)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="the tiny model, one seed: that it runs (the tests)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.model, args.max_tokens, args.warm_start = [0], "tiny", 16, 4
    runs = []
    with tempfile.TemporaryDirectory(prefix="agl-apo-") as scratch:
        folder = args.workdir or Path(scratch)  # each seed's copy of the tutorial, its store and log, kept there
        for seed in args.seeds:
            runs.append(one_run(seed, args, folder))
            shown = {key: value for key, value in runs[-1].items() if key not in ("candidates", "refused")}
            print(json.dumps(shown), flush=True)
    lines, complete = summary(runs, nothing_searched_allowed=args.quick)  # the tiny model's edits are gibberish
    why = "a run failed, or APO searched nothing (no edit kept the template's placeholders: only the seed ran)"
    return finish(runs, lines, complete, args.out, why)


if __name__ == "__main__":
    sys.exit(main())
