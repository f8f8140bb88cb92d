"""Coming from Agent Lightning: its users' code, with `import lightning_otel as agl`, runs through our Trainer, and
every way it could fail silently fails loudly instead. The agents are in tests/programs/agent_lightning_shapes.py.
The SQL tutorial's LangGraph agent and the GRPO run of the ADK block are in the verl lane (LangGraph and verl)."""

# ruff: noqa: UP006, UP035  (Agent Lightning's tutorials write typing.Dict; kept as they write it)
from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict

import pytest

import lightning_otel as agl
from lightning_otel.agent_api.function_agent import FunctionAgent
from lightning_otel.agent_api.lit_agent import rollout_method
from lightning_otel.testing import OpenAITestServer
from lightning_otel.testing.span_capture import SpanCapture
from tests.programs import agent_lightning_shapes as shapes

ROOT = Path(__file__).resolve().parents[1]
ROLLOUT = agl.Rollout(rollout_id="ro-1", attempt_id="at-1", attempt_number=2, runner_id="runner-a")


# --- names and signatures ---------------------------------------------------------------------------------------
def test_their_names_exist_and_mean_ours() -> None:
    assert agl.LitAgent[Dict[str, Any]] is not None  # subscriptable
    attempt = ROLLOUT.attempt
    assert (attempt.attempt_id, attempt.rollout_id, attempt.sequence_id, attempt.worker_id) == (
        "at-1", "ro-1", 2, "runner-a"
    )  # fmt: skip
    assert agl.NamedResources == dict[str, Any]
    assert agl.LLM(endpoint="http://x/v1", model="m", api_key=None).api_key is None
    with pytest.warns(DeprecationWarning, match="n_runners"):
        trainer = agl.Trainer(n_workers=3)
    assert trainer.n_runners == 3
    with pytest.warns(DeprecationWarning, match="max_rollouts"):
        assert agl.Trainer(max_tasks=5).runner_options.max_rollouts == 5
    with pytest.raises(TypeError, match="n_runners only"), pytest.warns(DeprecationWarning):
        agl.Trainer(n_workers=2, n_runners=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # our own spelling warns about nothing
        assert agl.Trainer(n_runners=2).n_runners == 2


def test_adapter_dict_with_their_keys_and_their_adapter_class() -> None:
    with pytest.warns(DeprecationWarning, match="repair_hierarchy") as caught:
        trainer = agl.Trainer(adapter={"agent_match": "write", "repair_hierarchy": False, "llm_call_match": "x"})
    assert trainer.adapter.agent_match == "write"
    assert any("llm_call_match" in str(w.message) for w in caught)
    with pytest.warns(DeprecationWarning, match="TraceToTriplet"):
        adapter = agl.TracerTraceToTriplet(agent_match="check", repair_hierarchy=True)
    assert isinstance(adapter, agl.TraceToTriplet) and adapter.agent_match == "check"
    with pytest.raises(ValueError, match="unknown adapter option"):
        agl.Trainer(adapter={"agent_macth": "write"})


def test_rollout_functions_are_bound_by_name_and_annotation_never_by_position() -> None:
    resources = {"main_llm": agl.ProxyLLM("http://gw:9/v1", "policy"), "notes": "x"}
    seen: dict[str, Any] = {}

    @agl.rollout
    def their_form(task: dict, llm: agl.LLM) -> float:
        seen["llm"] = llm
        return 1.0

    @agl.rollout
    def annotated(question: str, model: agl.LLM, info: agl.Rollout, resources: dict) -> None:
        seen.update(question=question, model=model, info=info, resources=resources)

    @agl.llm_rollout
    def old_llm_form(task: dict, llm, rollout) -> None:  # type: ignore[no-untyped-def]
        seen["rollout"] = rollout

    their_form.rollout({"q": 1}, resources, ROLLOUT)
    assert seen["llm"] == agl.LLM("http://gw:9/rollout/ro-1/attempt/at-1/v1", "policy")  # the proxy, resolved
    annotated.rollout("what?", resources, ROLLOUT)
    assert (seen["question"], seen["info"], seen["resources"]) == ("what?", ROLLOUT, resources)
    assert seen["model"].endpoint.endswith("/attempt/at-1/v1")
    old_llm_form.rollout({}, resources, ROLLOUT)
    assert seen["rollout"] is ROLLOUT

    with pytest.raises(TypeError, match="'client'"):

        @agl.rollout
        def unbindable(task: dict, client: object) -> None: ...

    with pytest.raises(TypeError, match="takes no `llm`"):

        @agl.llm_rollout
        def no_llm(task: dict, rollout: agl.Rollout) -> None: ...

    with pytest.raises(ValueError, match="no LLM"):
        their_form.rollout({}, {"notes": "x"}, ROLLOUT)


def test_prompt_template_resource_is_bound() -> None:
    @agl.rollout
    def prompted(task: dict, prompt_template: agl.PromptTemplate) -> str:
        return prompt_template.format(**task)

    template = agl.PromptTemplate("Answer {question} in SQL")
    assert prompted.rollout({"question": "how many?"}, {"p": template}, ROLLOUT) == "Answer how many? in SQL"


def test_rollout_async_and_split_training_validation_dispatch() -> None:
    agent = shapes.AsyncSplitAgent()
    method, is_async = rollout_method(agent, "train")
    assert (method.__name__, is_async) == ("rollout_async", True)
    method, is_async = rollout_method(agent, "val")
    assert (method.__name__, is_async) == ("validation_rollout", False)
    assert agent.is_async() and agent.name == "AsyncSplitAgent"
    assert rollout_method(FunctionAgent(shapes.guess_number_agent.function), "val")[1] is False
    agent.name = "renamed"  # Agent Lightning agents may set a name of their own
    assert agent.match_names() == ["renamed", "AsyncSplitAgent"]


def test_emit_reward_their_way(agl_spans: SpanCapture) -> None:
    with agl.rollout_context("ro-1", "at-1"):
        with pytest.warns(DeprecationWarning, match="emit_reward"):
            agl.emit_reward(reward=0.5)
        agl.emit_reward({"accuracy": 1.0, "brevity": 0.25}, primary_key="accuracy")
        with pytest.raises(ValueError, match="primary_key"):
            agl.emit_reward({"accuracy": 1.0}, primary_key="speed")
        with pytest.raises(TypeError, match="both"):
            agl.emit_reward(1.0, reward=1.0)
    rewards = [
        (span.attributes["agl.reward.name"], span.attributes["agl.reward.value"]) for span in agl_spans.reward_spans()
    ]
    assert rewards == [("primary", 0.5), ("primary", 1.0), ("accuracy", 1.0), ("brevity", 0.25)]


# --- their agents through Trainer.dev -------------------------------------------------------------------------------
def test_tinker_function_agent_runs_every_task_given(capsys: pytest.CaptureFixture[str]) -> None:
    tasks = [{"task_id": f"g{i}", "gold_answer": gold} for i, gold in enumerate([50, 75, 25, 60] * 3)][:10]
    with OpenAITestServer(replies=shapes.guess_replies) as server:
        with pytest.warns(DeprecationWarning, match="n_runners"):
            trainer = agl.Trainer(n_workers=1, initial_resources={"main_llm": agl.LLM(server.base_url, "agl-tiny")})
        result = trainer.dev(shapes.guess_number_agent, train_dataset=tasks)
    (batch,) = result.train
    assert len(batch.rollouts) == 10  # not 4: dev runs the tasks it is given
    rewards = {record["task_id"]: record["reward"] for record in batch.rollouts}
    assert rewards == {f"g{i}": 1.0 if [50, 75, 25, 60][i % 4] != 60 else 0.0 for i in range(10)}
    # agent_match=None: every call; calls outside any framework agent belong to the rollout's agent
    assert {t.agent_name for t in batch.triplets()} == {"guess_number_agent"}
    assert len(batch.triplets()) == 1 + 2 + 2 + 3 + 1 + 2 + 2 + 3 + 1 + 2


def test_adk_tutorial_block_agent_match_names_the_lit_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = [{"task_id": "t1", "question": "count users"}, {"task_id": "t2", "question": "list orders"}]
    with OpenAITestServer(replies=lambda body: "SELECT 1") as server:
        monkeypatch.setenv("OPENAI_API_BASE", server.base_url)
        monkeypatch.setenv("OPENAI_MODEL", "agl-tiny")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        trainer = shapes.adk_trainer_block(algorithm=None)
        result = trainer.dev(shapes.LitAdkAgent(), train_dataset=tasks, val_dataset=tasks[:1])
    # "LitAdkAgent" names no framework agent (the calls are root_agent's), yet selects every call of its rollouts
    assert [len(batch.triplets()) for batch in result.train + result.val] == [4, 2]
    assert {t.agent_name for batch in result.train for t in batch.triplets()} == {"root_agent"}
    adapted = next(iter(result.train[0].adapted.values()))
    assert adapted.diagnostics.rollout_agents == ["LitAdkAgent"]
    assert adapted.diagnostics.agents_seen == ["root_agent"]
    # a pattern naming the framework agent still selects by the nearest agent
    assert len(agl.TraceToTriplet(agent_match="root").adapt(next(iter(result.train[0].spans.values()))).triplets) == 2
    assert agl.TraceToTriplet(agent_match="check").adapt(next(iter(result.train[0].spans.values()))).triplets == []


def test_async_and_validation_rollouts_with_their_rewards() -> None:
    tasks = [{"task_id": "a", "question": "q"}]
    with OpenAITestServer() as server:
        trainer = agl.Trainer(n_runners=1, initial_resources={"main_llm": agl.LLM(server.base_url, "agl-tiny")})
        result = trainer.dev(shapes.AsyncSplitAgent(), tasks, val_dataset=tasks)
    assert [r["reward"] for r in result.train[0].rollouts] == [0.5]  # rollout_async ran for training
    assert [r["reward"] for r in result.val[0].rollouts] == [1.0]  # validation_rollout: primary_key's value
    (val,) = result.val[0].adapted.values()
    assert val.diagnostics.llm_calls == 0


# --- loud failures --------------------------------------------------------------------------------------------------
def test_dev_raises_when_every_rollout_failed() -> None:
    trainer = agl.Trainer(
        n_runners=1,
        settings=agl.RunSettings(max_attempts=1),
    )
    with pytest.raises(agl.AllRolloutsFailed, match="database spider_db is unreachable"):
        trainer.dev(shapes.broken_agent, [{"db_id": "spider_db"}] * 2)


def test_runners_that_reach_max_rollouts_stop_the_wait_loudly() -> None:
    trainer = agl.Trainer(n_runners=1, max_rollouts=2)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="max_rollouts=2"):
        trainer.dev(shapes.silent_agent, [{"task_id": str(i)} for i in range(4)], print_spans=False)
    assert time.monotonic() - started < 60


def _train_cli(*args: str, cwd: Path = ROOT, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "COLUMNS": "160"}
    return subprocess.run(
        [sys.executable, "-m", "lightning_otel.cli", "train", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"task_id": "t1", "db_id": "concert_singer"}\n{"task_id": "t2", "db_id": "pets"}\n')
    return path


def test_train_dev_exits_non_zero_when_every_rollout_failed(tasks_file: Path) -> None:
    done = _train_cli("--dev", "--test-server", "--runners", "1", "--agent",
                      "tests.programs.agent_lightning_shapes:broken_agent", "--train", str(tasks_file))  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "database concert_singer is unreachable" in done.stderr


def test_train_dev_exits_non_zero_when_no_call_becomes_a_sample(tasks_file: Path) -> None:
    done = _train_cli("--dev", "--test-server", "--runners", "1", "--agent",
                      "tests.programs.agent_lightning_shapes:silent_agent", "--train", str(tasks_file))  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "recorded no LLM call" in done.stdout and "no rollout gave a training sample" in done.stderr


def test_dev_says_why_agent_match_selected_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with OpenAITestServer(replies=lambda body: "SELECT 1") as server:
        trainer = agl.Trainer(
            n_runners=1,
            adapter={"agent_match": "LitAdk$"},  # a typo of the LitAgent's name
            initial_resources={"main_llm": agl.LLM(server.base_url, "agl-tiny")},
        )
        trainer.dev(shapes.LitAdkAgent(), [{"question": "q"}], print_spans=False)
    out = capsys.readouterr().out
    assert "no samples were selected" in out
    assert "agent_match='LitAdk$' selected none of 2 LLM calls" in out and "['LitAdkAgent']" in out


def test_the_policy_named_twice_is_an_error_in_seconds(tasks_file: Path, tmp_path: Path) -> None:
    pytest.importorskip("omegaconf", reason="training needs the [verl] extra (not in the openai3 lane)")
    config = tmp_path / "verl.yaml"
    config.write_text("actor_rollout_ref:\n  model:\n    path: Qwen/Qwen2.5-Coder-1.5B-Instruct\n")
    started = time.monotonic()
    done = _train_cli("--tiny-model", "--config", str(config), "--agent",
                      "tests.programs.agent_lightning_shapes:silent_agent", "--train", str(tasks_file))  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "named twice (--tiny-model and actor_rollout_ref.model.path in the config)" in done.stderr
    assert time.monotonic() - started < 30
