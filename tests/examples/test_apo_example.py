"""Agent Lightning's APO tutorial (examples/apo, its code with the import changed) runs offline against the
project's test server with scripted models (tests/examples/apo_scripted_models.py: the agent model answers in the
grader's format only when asked to, the critique model says to ask, the edit model appends the ask): APO must
read the failing rollouts' traces, get that critique, make the edit, find the edited prompt better on the
validation tasks, save it, publish it, and show each round's prompt in the rollout view."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from lightning_otel.collector.server import CollectorConfig, EmbeddedCollector
from lightning_otel.testing import Reply
from lightning_otel.testing.server import OpenAITestServer
from tests.examples.apo_scripted_models import ASK, reply

ROOT = Path(__file__).resolve().parents[2]


def run_the_tutorial(work: Path, replies: Callable[[dict[str, Any]], str | Reply]) -> tuple[Any, list[Any]]:
    """The tutorial's script, copied to `work`, against the test server playing `replies`: the finished process and
    the requests the models were sent."""
    shutil.copytree(ROOT / "examples" / "apo", work, ignore=shutil.ignore_patterns("apo-out", "__pycache__"))
    with OpenAITestServer(replies=replies) as models:
        env = {**os.environ, "OPENAI_BASE_URL": models.base_url, "OPENAI_API_KEY": "test",
               "PYTHONPATH": str(ROOT)}  # fmt: skip
        done = subprocess.run([sys.executable, "room_selector_apo.py"], cwd=work, env=env, capture_output=True,
                              text=True, timeout=600)  # fmt: skip
        return done, list(models.requests)


def test_the_apo_tutorial_finds_the_prompt_the_grader_needs(tmp_path: Path) -> None:
    work = tmp_path / "apo"
    done, requests = run_the_tutorial(work, reply)
    critiques = [r for r in requests if json.dumps(r.body).find("You review the prompt template") >= 0]
    assert done.returncode == 0, done.stderr[-3000:]
    best = (work / "apo-out" / "best_prompt.txt").read_text()
    assert ASK in best and "{attendees}" in best, best
    assert best in done.stdout and "validation 1.000, seed 0.000" in done.stdout, done.stdout
    # a perfect candidate ends the search: the seed's 8 validation rollouts, one round (2 minibatches of 4 and the
    # child's 8 on validation), the winner's 8 on the whole validation set
    assert "; 32 rollouts," in done.stdout, done.stdout  # 8 + 4 + 4 + 8 + 8
    history = json.loads((work / "apo-out" / "history.json").read_text())
    by_label = {c["label"]: c for c in history["candidates"]}
    assert by_label["p0"]["val_score"] == 0.0 and by_label[history["best"]]["val_score"] == 1.0
    assert by_label[history["best"]]["parent"] == "p0" and "final_choice" in by_label[history["best"]]["critique"]
    # the critique read the rollouts' traces: the tool call, the tool's rooms and the agent's unhelpful answer
    critique_input = json.dumps(critiques[0].body)
    assert "get_rooms_and_availability" in critique_input and "Several rooms could work" in critique_input
    assert "reward 0.0" in critique_input
    # the rollout view over the run's store: each batch labelled with its round, the prompt it ran with
    store = f"sqlite:///{work / 'apo-out' / 'collector.sqlite3'}"
    collector = EmbeddedCollector(CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=store))
    addresses = collector.start()
    try:
        (run,) = httpx.get(f"{addresses.query}/v1/ui/runs").json()["runs"]
        notes = [step["note"] for step in run["steps"]]
        assert any("p0 · validation" in (note or "") for note in notes)
        assert any("p0 · minibatch, traces for a critique" in (note or "") for note in notes)
        assert any("p1 · minibatch, against its parent" in (note or "") for note in notes)
        final = next(step for step in run["steps"] if "full validation" in (step["note"] or ""))
        page = httpx.get(f"{addresses.query}/v1/ui/runs/{run['run_id']}/val/{final['step']}").json()
        (templates,) = page["prompts"].values()
        assert templates == {"prompt_template": best} and page["step"]["reward_mean"] == 1.0
        resources = httpx.get(f"{addresses.query}/v1/resources/latest").json()["resources"]
        assert resources["prompt_template"]["template"] == best  # published
    finally:
        collector.stop()


def test_a_run_whose_every_edit_is_refused_fails_and_says_why(tmp_path: Path) -> None:
    """An edit model that drops the template's placeholders: no candidate but the seed ever runs, so APO searched
    nothing; the tutorial must exit non-zero and say so, not print the seed as its best prompt."""

    def no_placeholders(body: dict[str, Any]) -> str | Reply:
        first = str((body.get("messages") or [{}])[0].get("content") or "")
        return "Pick the best room." if first.startswith("You edit prompt templates") else reply(body)

    work = tmp_path / "apo"
    done, _ = run_the_tutorial(work, no_placeholders)
    assert done.returncode != 0, done.stdout[-2000:]
    assert "APO tried no prompt but the seed" in done.stderr and "were refused" in done.stderr, done.stderr[-2000:]
    assert "best prompt (" not in done.stdout
    history = json.loads((work / "apo-out" / "history.json").read_text())
    refused = [c for c in history["candidates"] if c.get("rejected_because")]
    assert refused and all(c["template"] == "Pick the best room." for c in refused)
