"""The AgentGRPO example as its README runs it, from nothing: data -> `reward-model convert` -> `train` (TRL, here)
-> `serve` -> `train_sql_agent.py --ci-fast`, whose runners run the OpenAI Agents SDK agent in the `openai_agents`
lane's environment (openai 3.x). Two GRPO steps train with the reward model as a reward source, and the stored
spans show every score: a `score {model}` span and a reward named `reward_model` whose source is the model, linked
by response id to the LLM call that produced the judged answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lightning_otel import semconv
from lightning_otel.collector import Client, EmbeddedCollector
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agent_grpo"
AGENT_PYTHON = os.environ.get("AGL_SERVICE_PYTHON", "")  # the noxfile points it at the openai_agents lane's env
CLI = [sys.executable, "-m", "lightning_otel.cli", "reward-model"]


def run(command: list[str], log: Path | None = None, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """`command`, which must succeed; on failure the message carries `log`'s end (where the example sends the rest)."""

    def tail() -> str:
        return log.read_text(errors="replace")[-6000:] if log is not None and log.exists() else ""

    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, **kwargs)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{command} ran past 600 s\n{exc.stdout!r}\n{tail()}")
    assert done.returncode == 0, f"{command}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}\n{tail()}"
    return done


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, dict]]:
    work = tmp_path_factory.mktemp("agent-grpo")
    run([sys.executable, "medical_data.py", str(work / "data")], cwd=EXAMPLE)
    raw, pairs = work / "data" / "raw_preferences.jsonl", work / "pairs.jsonl"
    run([*CLI, "convert", "--input", str(raw), "--output", str(pairs)])
    from lightning_otel.testing.tiny_model import save_tiny_model

    base = save_tiny_model(work / "base")
    run([*CLI, "train", "--model", str(base), "--data", str(pairs), "--output", str(work / "rm"),
         "--epochs", "2", "--learning-rate", "3e-4"])  # fmt: skip
    metrics = json.loads((work / "rm" / "reward_model_metrics.json").read_text())
    port = free_port()
    server = subprocess.Popen([*CLI, "serve", "--model", str(work / "rm"), "--port", str(port)])
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the reward model service did not start")
            time.sleep(0.3)
        yield f"http://127.0.0.1:{port}", work, metrics
    finally:
        server.terminate()
        server.wait(30)


def test_the_reward_model_learns_the_preference_set(reward_model: tuple[str, Path, dict]) -> None:
    _, _, metrics = reward_model
    assert metrics["accuracy_after"] > metrics["accuracy_before"] and metrics["accuracy_after"] > 0.55, metrics


def test_two_grpo_steps_with_the_reward_model_as_a_reward_source(reward_model: tuple[str, Path, dict]) -> None:
    if not AGENT_PYTHON or not Path(AGENT_PYTHON).exists():
        if os.environ.get("CI"):
            pytest.fail(f"AGL_SERVICE_PYTHON={AGENT_PYTHON!r}: the agent's environment is missing in CI")
        pytest.skip("the agent's environment is missing (run the openai_agents nox session first)")
    url, work, _ = reward_model
    runs = work / "runs"
    run([sys.executable, "train_sql_agent.py", "--ci-fast", "--device", "cpu", "--data", str(work / "data"),
         "--reward-model-url", url, "--runner-python", AGENT_PYTHON, "--n-runners", "1", "--collector-port", "0",
         "--workdir", str(runs)], log=runs / "train.log", cwd=EXAMPLE)  # fmt: skip
    summary = json.loads((runs / "summary.json").read_text())
    assert [step["step"] for step in summary["steps"]] == [1, 2] and summary["reward_model"] == "rm"
    for step in summary["steps"]:
        metrics = step["metrics"]
        assert metrics["rollout/succeeded"] == metrics["rollout/rollouts"] == 4  # 2 questions x 2 rollouts
        assert metrics["rollout/triplets"] == metrics["rollout/gateway_calls"] > 0
        assert set(step["sample_agents"]) == {"MedicalSQLAgent"} and metrics["training/skipped_step"] == 0
    with EmbeddedCollector.on_sqlite_file(summary["store"].removeprefix("sqlite:///")) as addresses:
        client = Client(addresses.query)
        rollouts = client.rollouts(limit=100)
        assert len(rollouts) == 8
        linked = 0
        for rollout in rollouts:
            spans = client.rollout_spans(rollout["rollout_id"])
            chats = [s for s in spans if s["attributes"].get(semconv.GEN_AI_OPERATION_NAME) == "chat"]
            calls = {s["attributes"].get(semconv.GEN_AI_RESPONSE_ID) for s in chats}
            last = max(chats, key=lambda s: int(s["endTimeUnixNano"]))["attributes"]
            (scoring,) = [s for s in spans if s["name"] == "score rm"]
            assert scoring["attributes"][semconv.AGL_REWARD_MODEL_URL] == url
            rewards = {s["attributes"][semconv.AGL_REWARD_NAME]: s["attributes"] for s in spans
                       if s["name"] == semconv.REWARD_SPAN_NAME}  # fmt: skip
            judged = rewards["reward_model"]
            assert judged[semconv.AGL_REWARD_SOURCE] == "rm"
            assert judged[semconv.AGL_REWARD_VALUE] == pytest.approx(scoring["attributes"]["agl.reward_model.score"])
            if semconv.AGL_REWARD_RESPONSE_ID in judged:
                assert judged[semconv.AGL_REWARD_RESPONSE_ID] in calls  # linked to the call that gave the answer
                linked += 1
            else:  # an empty reply (the random policy's stop token): the Agents SDK keeps no output item of it,
                # so there is no id to link and the judgement is the rollout's
                assert last[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] <= 3, last
            assert rewards["primary"][semconv.AGL_REWARD_VALUE] == pytest.approx(
                rewards["execution"][semconv.AGL_REWARD_VALUE] + 0.5 * judged[semconv.AGL_REWARD_VALUE]
            )
        assert linked > 0
