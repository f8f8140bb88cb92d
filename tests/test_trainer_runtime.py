"""The trainer runtime end to end: Trainer -> embedded collector queue -> runner processes -> agent -> spans ->
adapter, against the package's OpenAI-compatible test server (real processes, real HTTP on loopback)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import lightning_otel
from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.collector import Client, CollectorConfig, EmbeddedCollector
from lightning_otel.testing import OpenAITestServer, runtime_agents
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "sql_agent"))  # the example as its users import it
import agent as sql_example  # noqa: E402


def llm(server: OpenAITestServer) -> lightning_otel.LLM:
    return lightning_otel.LLM(server.base_url, "agl-tiny")


def assert_ids_are_the_servers(server: OpenAITestServer, triplets: list[Any]) -> None:
    for triplet in triplets:
        (response_id,) = triplet.response_ids
        served = server.served[response_id]
        assert triplet.prompt_token_ids == served.prompt_token_ids
        assert triplet.response_token_ids == served.response_token_ids[0]
        assert triplet.response_mask == [1] * len(triplet.response_token_ids)


def test_fit_with_two_runners_selects_agents_with_the_servers_token_ids() -> None:
    with OpenAITestServer(replies=sql_example.dev_replies) as server:
        trainer = lightning_otel.Trainer(
            n_runners=2,
            algorithm=lightning_otel.Baseline(batch_size=4, n_rollouts=2),
            adapter={"agent_match": "write"},
            initial_resources={"main_llm": llm(server)},
            runner_options=lightning_otel.RunnerOptions(max_concurrency=2),
        )
        result = trainer.fit(sql_example.sql_rollout, sql_example.DEV_TASKS)
    (batch,) = result.train
    assert batch.metrics()["succeeded"] == 8
    assert sorted(len(group) for group in batch.groups().values()) == [2, 2, 4, 4]  # orders tasks: write + rewrite
    by_task = {record["rollout_id"]: record["task_id"] for record in batch.rollouts}
    expected_reward = {"unknown-table": 0.0}
    for rollout_id, spans in batch.spans.items():
        task_id = by_task[rollout_id]
        rewrites = task_id in ("customers-2024", "orders-per-customer")
        selections = {"write": ["write", "rewrite"] if rewrites else ["write"], "^check$": ["check"], None: None}
        for agent_match, agents in selections.items():
            adapted = TraceToTriplet(agent_match=agent_match).adapt(spans)
            names = [t.agent_name for t in adapted.triplets]
            assert names == (agents or ["write", "check", "rewrite"][: 3 if rewrites else 2]), (task_id, agent_match)
            assert_ids_are_the_servers(server, adapted.triplets)
            assert {t.rollout_id for t in adapted.triplets} == {rollout_id}
            assert adapted.final_reward == expected_reward.get(task_id, 1.0)
        # the returned reward goes to the last call of the rollout
        everything = TraceToTriplet().adapt(spans).triplets
        assert [t.reward for t in everything] == [None] * (len(everything) - 1) + [expected_reward.get(task_id, 1.0)]
    assert len(batch.triplets()) == 2 * (1 + 2 + 1 + 2)  # write(+rewrite) per rollout, two rollouts per task
    assert result.metrics()["train/reward_mean"] == pytest.approx(0.75)


def test_dev_prints_each_rollout_with_spans_samples_and_rewards(capsys: pytest.CaptureFixture[str]) -> None:
    with OpenAITestServer(replies=sql_example.dev_replies) as server:
        trainer = lightning_otel.Trainer(
            n_runners=1, adapter={"agent_match": "^check$"}, initial_resources={"main_llm": llm(server)}
        )
        result = trainer.dev(sql_example.sql_rollout, sql_example.DEV_TASKS, n_tasks=2)
    out = capsys.readouterr().out
    assert len(result.train) == 1 and len(result.train[0].rollouts) == 2
    for expected in (
        "invoke_agent write",
        "chat agl-tiny",
        "agent=check",
        "agl.reward",
        "agent_match='^check$'",
        "dev summary",
        "samples 2",
    ):
        assert expected in out, expected


def test_a_runner_killed_mid_rollout_leads_to_a_retry_and_no_duplicate_samples(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    tasks = [{"id": "hang", "question": "q0", "hang": True, "pid_file": str(pid_file)}] + [
        {"id": f"t{i}", "question": f"q{i}"} for i in range(1, 4)
    ]
    with OpenAITestServer() as server:
        trainer = lightning_otel.Trainer(
            n_runners=2,
            algorithm=lightning_otel.Baseline(batch_size=4),
            initial_resources={"main_llm": llm(server)},
            collector=CollectorConfig.embedded(store_url=f"sqlite:///{tmp_path}/collector.sqlite3"),
            runner_options=lightning_otel.RunnerOptions(max_concurrency=4),
        )
        outcome: dict[str, Any] = {}
        fitting = threading.Thread(
            target=lambda: outcome.update(result=trainer.fit(runtime_agents.hang_once_agent, tasks))
        )
        fitting.start()
        deadline = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        fitting.join(120)
        assert not fitting.is_alive()
    (batch,) = outcome["result"].train
    by_task = {record["task_id"]: record for record in batch.rollouts}
    assert {record["status"] for record in batch.rollouts} == {"succeeded"}
    attempts = sqlite3.connect(tmp_path / "collector.sqlite3").execute("SELECT * FROM agl_attempts").fetchall()
    assert (by_task["hang"]["attempts"], by_task["hang"]["attempt_id"]) == (2, "at-2"), attempts
    hang_id = by_task["hang"]["rollout_id"]
    assert {span["attributes"]["agl.attempt.id"] for span in batch.spans[hang_id]} == {"at-2"}
    samples = batch.adapted[hang_id].triplets
    assert [t.agent_name for t in samples] == ["write", "check"]  # the killed attempt's write call is not here
    assert_ids_are_the_servers(server, batch.triplets())
    assert len(batch.triplets()) == 8
    killed_calls = [s for s in server.served.values() if "baggage" in s.headers and "at-1" in s.headers["baggage"]]
    assert len([c for c in killed_calls if hang_id in c.headers["baggage"]]) == 1  # at-1's write was served


def test_agent_errors_retry_up_to_max_attempts_then_fail() -> None:
    tasks = [
        {"id": "once", "question": "a", "fail_attempts": 1},
        {"id": "always", "question": "b", "fail_attempts": 9},
        {"id": "fine", "question": "c"},
    ]
    with OpenAITestServer() as server:
        trainer = lightning_otel.Trainer(
            n_runners=1,
            initial_resources={"main_llm": llm(server)},
            progress=False,
            settings=lightning_otel.RunSettings(max_attempts=2),
        )
        result = trainer.fit(runtime_agents.flaky_agent, tasks)
    records = {r["task_id"]: r for r in result.train[0].rollouts}
    assert (records["once"]["status"], records["once"]["attempts"]) == ("succeeded", 2)
    assert (records["always"]["status"], records["always"]["attempts"]) == ("failed", 2)
    assert "RuntimeError: flaky failure on attempt 2" in records["always"]["error"]
    assert (records["fine"]["status"], records["fine"]["attempts"]) == ("succeeded", 1)
    metrics = result.train[0].metrics()
    assert (metrics["succeeded"], metrics["failed"], metrics["retried"], metrics["triplets"]) == (2, 1, 2, 2)


def test_emitted_rewards_link_by_response_id_and_a_returned_one_too_is_reported() -> None:
    tasks = [{"id": "emits", "question": "q"}, {"id": "both", "question": "q", "also_return": True}]
    with OpenAITestServer() as server:
        trainer = lightning_otel.Trainer(n_runners=1, initial_resources={"main_llm": llm(server)})
        result = trainer.fit(runtime_agents.emitting_agent, tasks)
    batch = result.train[0]
    records = {r["task_id"]: r for r in batch.rollouts}
    for task_id in ("emits", "both"):
        adapted = batch.adapted[records[task_id]["rollout_id"]]
        assert [(t.agent_name, t.reward) for t in adapted.triplets] == [("write", 0.75), ("check", 0.25)]
    assert records["emits"]["error"] is None
    assert "returned a reward (1.0) and also emitted 2" in records["both"]["error"]
    assert records["both"]["status"] == "succeeded"


def test_a_runner_started_elsewhere_joins_a_training_and_stops_cleanly(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/collector.sqlite3"
    config = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=store, auth_token="s3cret")
    with EmbeddedCollector(config) as addresses, OpenAITestServer() as server:
        runner = subprocess.Popen(
            [sys.executable, "-m", "lightning_otel.cli", "runner", "--collector", addresses.query,
             "--agent", "lightning_otel.testing.runtime_agents:flaky_agent", "--auth-token", "s3cret"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            trainer = lightning_otel.Trainer(
                n_runners=0,
                collector=addresses.query,
                auth_token="s3cret",
                initial_resources={"main_llm": llm(server)},
            )
            # by name: with n_runners=0 the trainer never imports the agent (its environment may lack its libraries)
            tasks = [{"question": f"q{i}"} for i in range(6)]
            result = trainer.fit("lightning_otel.testing.runtime_agents:flaky_agent", tasks)
            assert result.train[0].metrics()["succeeded"] == 6
            assert len(result.train[0].triplets()) == 6
            assert_ids_are_the_servers(server, result.train[0].triplets())
        finally:
            runner.send_signal(signal.SIGTERM)
            output, _ = runner.communicate(timeout=30)
        assert runner.returncode == 0, output
        assert "6 claimed, 6 succeeded, 0 failed" in output
        assert " INFO " not in output  # quiet by default: no line per claim, HTTP request or LLM call (--verbose)
        assert Client(addresses.query, auth_token="s3cret").queue_stats()["succeeded"] == 6


def test_a_runner_started_for_a_training_that_never_comes_stops_after_its_idle_bound(tmp_path: Path) -> None:
    with EmbeddedCollector.on_sqlite_file(tmp_path / "collector.sqlite3") as addresses:
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "lightning_otel.cli", "runner", "--collector", addresses.query,
             "--agent", "lightning_otel.testing.runtime_agents:flaky_agent", "--idle-stop-s", "1"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "no run is live on this collector (none started, or it ended): stopping" in said
    assert time.monotonic() - began < 60  # one idle claim (10 s) past the bound, not forever


def test_an_agent_named_for_runners_elsewhere_is_not_imported_here() -> None:
    from lightning_otel.agent_api.agent_loading import AgentElsewhere, as_agent

    elsewhere = as_agent("no_such_package.agents:medical_rollout", import_spec=False)
    assert isinstance(elsewhere, AgentElsewhere) and elsewhere.name == "medical_rollout"
    with pytest.raises(RuntimeError, match="runs in runners started elsewhere"):
        elsewhere.rollout({}, {}, None)
    with pytest.raises(ModuleNotFoundError):  # runners of this process would run it: imported, and it fails now
        as_agent("no_such_package.agents:medical_rollout")


def test_runner_cli_reports_an_agent_it_cannot_load() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lightning_otel.cli", "runner", "--collector", "http://127.0.0.1:9", "--agent", "nope"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "cannot load --agent 'nope'" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_agent_runners_cannot_import_is_refused_before_anything_starts() -> None:
    def local_agent(task: Any) -> float:
        return 1.0

    trainer = lightning_otel.Trainer(n_runners=1)
    with pytest.raises(TypeError, match="define it at module level"):
        trainer.fit(lightning_otel.rollout(local_agent), [{"question": "q"}])


def test_a_litellm_agent_through_the_trainer() -> None:
    pytest.importorskip("litellm")  # not in the openai 3 lane (LiteLLM pins openai < 3)
    with OpenAITestServer() as server:
        trainer = lightning_otel.Trainer(
            n_runners=1, adapter={"agent_match": "^solver$"}, initial_resources={"main_llm": llm(server)}
        )
        result = trainer.fit(runtime_agents.litellm_agent, [{"question": f"q{i}"} for i in range(3)])
    batch = result.train[0]
    assert batch.metrics()["succeeded"] == 3
    assert [t.agent_name for t in batch.triplets()] == ["solver"] * 3
    assert_ids_are_the_servers(server, batch.triplets())
    assert set(batch.rewards().values()) == {1.0}  # the echo server repeats the question


def test_a_runner_outlives_a_collector_restart(tmp_path: Path) -> None:
    """Claims that fail while the collector is down are retried; the queue (in the store) survives the restart."""
    store = f"sqlite:///{tmp_path}/collector.sqlite3"

    def config(query_port: int = 0, http_port: int = 0) -> CollectorConfig:
        return CollectorConfig(http_port=http_port, grpc_port=None, query_port=query_port, store_url=store)

    with OpenAITestServer() as server:
        first = EmbeddedCollector(config())
        addresses = first.start()
        query_port, http_port = (int(url.rsplit(":", 1)[1]) for url in (addresses.query, addresses.otlp_http))
        Client(addresses.query).put_resources({"main_llm": {"__resource__": "llm", "endpoint": server.base_url,
                                                            "model": "agl-tiny"}})  # fmt: skip
        runner = subprocess.Popen(
            [sys.executable, "-m", "lightning_otel.cli", "runner", "--collector", addresses.query,
             "--agent", "lightning_otel.testing.runtime_agents:flaky_agent", "--max-rollouts", "2"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            # the runner is up: it ran a first rollout, and its next claim is long-polling when the collector stops
            # (a fixed sleep was not enough on a 2-core CI machine: the runner had not started polling yet)
            with Client(addresses.query) as first_client:
                warm = first_client.enqueue([{"input": {"question": "q0"}}])
                assert first_client.wait_rollouts([warm[0]["rollout_id"]], timeout=60)["done"]
            first.stop()
            time.sleep(2)  # its claims fail meanwhile
            with EmbeddedCollector(config(query_port, http_port)) as again:
                client = Client(again.query)
                queued = client.enqueue([{"input": {"question": "q1"}}])
                done = client.wait_rollouts([r["rollout_id"] for r in queued], timeout=60)
                output, _ = runner.communicate(timeout=60)
        finally:
            runner.kill()
    assert done["done"] and {r["status"] for r in done["rollouts"]} == {"succeeded"}, output
    assert "unreachable" in output and "answers again after" in output, output  # the client rode it out, said so
    assert runner.returncode == 0


def test_train_dev_cli_runs_a_dataset_file_through_trainer_dev(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "q1"}\n\n{"question": "q2", "fail_attempts": 9}\n')
    command = [sys.executable, "-m", "lightning_otel.cli", "train", "--dev", "--test-server", "--train", str(tasks),
               "--agent", "lightning_otel.testing.runtime_agents:flaky_agent", "--agent-match", "^solo$"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dev summary" in done.stdout and "rollouts 2  succeeded 1  failed 1" in done.stdout
    assert "RuntimeError: flaky failure on attempt 3" in done.stdout  # the failing task's error, shown
    without_dev = subprocess.run(command[:4] + command[5:], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert without_dev.returncode == 2 and "give --model" in without_dev.stderr  # training needs a policy model


def test_train_cli_uses_a_running_collector_and_reads_parquet_tasks(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    tasks = tmp_path / "tasks.parquet"
    pd.DataFrame([{"question": "q1"}, {"question": "q2"}]).to_parquet(tasks)
    with EmbeddedCollector.on_sqlite_file(tmp_path / "collector.sqlite3", fresh=True) as addresses:
        command = [sys.executable, "-m", "lightning_otel.cli", "train", "--dev", "--test-server", "--train", str(tasks),
                   "--agent", "lightning_otel.testing.runtime_agents:flaky_agent",
                   "--collector", addresses.query]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
        with Client(addresses.query) as client:
            stored = client.queued_rollouts(status="succeeded")
    assert sorted(record["input"]["question"] for record in stored) == ["q1", "q2"]  # in the collector given
    # the embedded collector on fixed ports, the policy's address in a notify file
    port = free_port()
    notify = tmp_path / "policy.json"
    bare = [*command[:-2], "--gateway", "--agent-match", "^solver$", "--collector-port", str(port),
            "--policy-notify-file", str(notify)]  # fmt: skip
    agents = "lightning_otel.testing.runtime_agents"
    bare[bare.index(f"{agents}:flaky_agent")] = f"{agents}:bare_http_agent"
    done = subprocess.run(bare, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "samples 4" in done.stdout  # 2 tasks x 2 calls, recorded by the gateway, named by the header
    policy = json.loads(notify.read_text())
    assert policy["version"] == 2 and policy["base_url"] == f"http://{policy['address']}/v1"  # the dev gateway


def test_a_second_session_on_one_collector_claims_its_first_rollout_at_once(tmp_path: Path) -> None:
    """The first session's runner leaves a claim parked in the collector when it stops; marked lost, that claim
    returns nothing, so the second session's first rollout goes to the second session's runner at once."""
    with (
        OpenAITestServer(replies=sql_example.dev_replies) as server,
        EmbeddedCollector.on_sqlite_file(tmp_path / "collector.sqlite3", fresh=True) as addresses,
    ):
        runs = []
        for _ in range(2):
            trainer = lightning_otel.Trainer(
                n_runners=1,
                algorithm=lightning_otel.Baseline(batch_size=2),
                initial_resources={"main_llm": llm(server)},
                collector=addresses.query,
                progress=False,
            )
            runs.append(trainer.fit(sql_example.sql_rollout, sql_example.DEV_TASKS[:2]))
            time.sleep(0.5)  # the runner's next claim is parked in the collector when the session ends
        with Client(addresses.query) as client:
            attempts = [client.rollout(r["rollout_id"])["attempt_list"] for r in runs[0].train[0].rollouts]
            first_runner = {attempt["runner_id"] for listed in attempts for attempt in listed}
            for record in runs[1].train[0].rollouts:
                rollout = client.rollout(record["rollout_id"])
                (attempt,) = rollout["attempt_list"]  # claimed once, by a live runner
                assert attempt["runner_id"] not in first_runner
                # the new runner process boots in ~1 s (3+ s on a loaded 2-core machine); the dead runner's claim
                # would have held it for the heartbeat timeout (30 s) before a retry
                assert (attempt["start_ns"] - rollout["created_ns"]) / 1e9 < 15.0


def test_dev_with_a_gateway_dry_runs_an_agent_that_is_not_instrumented(capsys: pytest.CaptureFixture[str]) -> None:
    tasks = [{"question": "q1"}, {"question": "q2"}]
    with OpenAITestServer() as server:
        trainer = lightning_otel.Trainer(
            n_runners=1, adapter={"agent_match": "^solver$"}, initial_resources={"main_llm": llm(server)}
        )
        result = trainer.dev(runtime_agents.bare_http_agent, tasks, gateway=True)
        assert len(server.served) == 4  # 2 tasks x 2 calls
        triplets = result.train[0].triplets()
        assert len(triplets) == 4 and {t.agent_name for t in triplets} == {"solver"}  # the header's name
        assert_ids_are_the_servers(server, triplets)
        assert "samples 4" in capsys.readouterr().out
        without = trainer.dev(runtime_agents.bare_http_agent, tasks)  # straight to the server: nothing records it
        assert without.train[0].triplets() == []
        assert "no samples were selected" in capsys.readouterr().out
