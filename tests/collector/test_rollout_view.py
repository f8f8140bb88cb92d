"""The rollout view's JSON (`/v1/ui/...`) over a real recorded training run: what it says per step, rollout and call
is what the adapter gives the trainer for the same spans, token ids are the server's, and a rollout without a sample
says why. (The page itself is tested in a real browser: tests/browser_lane.)"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.collector import Client, CollectorConfig, EmbeddedCollector
from lightning_otel.collector.reads.token_text import TokenizerUnavailable
from lightning_otel.testing.tokenizer import build_tokenizer
from lightning_otel.training.loop.samples import Sample
from tests.programs import recorded_run

TOKEN = "view-secret"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with recorded_run.served(tmp_path_factory.mktemp("recorded"), TOKEN) as served:
        yield served


def get(recorded: dict[str, Any], path: str, **params: str) -> Any:
    response = recorded["http"].get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_page_is_open_but_every_json_route_needs_the_token(recorded: dict[str, Any]) -> None:
    for path in ("/ui", "/ui/", "/ui/app.js", "/ui/style.css"):
        response = httpx.get(recorded["url"] + path)
        assert response.status_code == 200 and response.content, path
    assert "text/html" in httpx.get(recorded["url"] + "/ui").headers["content-type"]
    assert httpx.get(recorded["url"] + "/ui/secrets.txt").status_code == 401  # only the page's own files are open
    assert recorded["http"].get("/ui/secrets.txt").status_code == 404
    for path in ("/v1/ui/runs", "/v1/ui/config", "/v1/ui/rollouts/x"):
        assert httpx.get(recorded["url"] + path).status_code == 401, path
    config = get(recorded, "/v1/ui/config")
    tokenizer = config.pop("tokenizer")  # given as an absolute path: named by its last parts, no machine's folders
    assert tokenizer.startswith("…/") and tokenizer.endswith("/tokenizer") and tokenizer.count("/") == 2, tokenizer
    assert config == {"jaeger_ui_url": recorded_run.JAEGER_UI, "phoenix_ui_url": recorded_run.PHOENIX_UI, "auth": True}


def test_runs_list_each_step_with_its_rollouts_rewards_and_policy_version(recorded: dict[str, Any]) -> None:
    (run,) = get(recorded, "/v1/ui/runs")["runs"]
    result = recorded["result"]
    assert run["agent_match"] == "write" and run["rollouts"] == 22
    steps = {(s["mode"], s["step"]): s for s in run["steps"]}
    assert sorted(steps) == [("train", 1), ("train", 2), ("val", 1)]
    for number, batch in enumerate(result.train, start=1):
        step = steps[("train", number)]
        assert step["rollouts"] == 10 and step["statuses"] == {"succeeded": 8, "failed": 2}
        rewards = [r["reward"] for r in batch.rollouts if r["reward"] is not None]
        assert step["reward_mean"] == pytest.approx(statistics.fmean(rewards))
        assert step["policy_versions"] == [1] and step["batch_id"] == batch.batch.batch_id


def test_a_steps_rollouts_carry_the_adapters_samples_and_decisions(recorded: dict[str, Any]) -> None:
    (run,) = get(recorded, "/v1/ui/runs")["runs"]
    for agent_match in (None, "^check$"):
        params = {} if agent_match is None else {"agent_match": agent_match}
        step = get(recorded, f"/v1/ui/runs/{run['run_id']}/train/1", **params)
        adapter = TraceToTriplet(agent_match=agent_match or "write")
        assert step["agent_match"] == (agent_match or "write") and len(step["rollouts"]) == 10
        for row in step["rollouts"]:
            if row["status"] != "succeeded":
                assert row["samples"] == 0 and "ended failed after 2 attempt(s)" in row["no_sample_reason"]
                assert "raised on purpose" in row["no_sample_reason"] and row["attempts"] == 2
                continue
            spans = recorded["client"].rollout_spans(row["rollout_id"], attempt_id=row["attempt_id"])
            adapted = adapter.adapt(spans)
            assert row["samples"] == len(adapted.triplets) and row["no_sample_reason"] is None
            assert [(c["span_id"], c["selected"], c["reason"]) for c in row["calls"]] == [
                (d.span_id, d.selected, d.reason) for d in adapted.diagnostics.calls
            ]
            assert row["runner_id"].startswith("runner-") and row["policy_version"] == 1
            assert set(row["agents"]) <= {"write", "check", "rewrite"}


def test_a_rollout_shows_its_tree_and_every_call_with_the_servers_tokens(recorded: dict[str, Any]) -> None:
    (run,) = get(recorded, "/v1/ui/runs")["runs"]
    step = get(recorded, f"/v1/ui/runs/{run['run_id']}/train/2")
    row = next(r for r in step["rollouts"] if r["task_id"] == "customers-2024")  # write, check, rewrite
    view = get(recorded, f"/v1/ui/rollouts/{row['rollout_id']}")
    assert view["rollout"]["status"] == "succeeded" and view["step"] == 2 and view["run_id"] == run["run_id"]
    assert [c["agent"] for c in view["calls"]] == ["write", "check", "rewrite"]
    assert [c["decision"]["selected"] for c in view["calls"]] == [True, False, True]
    assert [c["decision"]["sample"] for c in view["calls"]] == [0, None, 1] and len(view["samples"]) == 2
    tokenizer = build_tokenizer()
    for call in view["calls"]:
        served = recorded["served"][call["response_id"]]
        assert call["prompt_token_ids"] == served.prompt_token_ids
        assert call["response_token_ids"] == served.response_token_ids[0]
        assert len(call["response_logprobs"]) == len(call["response_token_ids"])
        assert "".join(call["response_pieces"]) == tokenizer.decode(call["response_token_ids"])
        assert call["policy_version"] == 1 and call["token_ids_complete"] is True
        assert call["input_messages"] and call["output_messages"]  # content capture was on
    kinds = {s["attributes"].get("gen_ai.operation.name") for s in view["spans"]}
    assert {"invoke_agent", "chat"} <= kinds and any(s["name"] == "agl.reward" for s in view["spans"])
    assert all("agl.llm.prompt_token_ids" not in s["attributes"] for s in view["spans"])  # ids only under calls
    traces = {s["traceId"] for s in view["spans"]}
    assert {link["url"] for link in view["links"]} == {
        *(f"http://jaeger.example:16686/trace/{t}" for t in traces),
        *(f"http://phoenix.example:6006/redirects/traces/{t}" for t in traces),
    }


def test_every_trained_call_shows_its_return_and_advantages_as_the_estimator_computes_them(recorded) -> None:
    """The view's credit (return, A_rollout, A_step, anchor group) equals `AnchorAdvantage` on the same spans, group
    by group; both pages agree; each call links the other members of its anchor state."""
    (run,) = get(recorded, "/v1/ui/runs")["runs"]
    step = get(recorded, f"/v1/ui/runs/{run['run_id']}/train/2")
    adapter, samples = TraceToTriplet(agent_match="write"), []
    for row in step["rollouts"]:
        if row["status"] == "succeeded":
            adapted = adapter.adapt(recorded["client"].rollout_spans(row["rollout_id"], attempt_id=row["attempt_id"]))
            group = recorded["client"].rollout(row["rollout_id"])["group_id"]
            samples += [Sample(t, row["reward"], group, rollout=row["rollout_id"],
                               step_rewards_total=adapted.step_rewards_total) for t in adapted.triplets]  # fmt: skip
    recorded_run.CREDIT.assign(samples)
    expected = {sample.triplet.span_ids[0]: sample.credit for sample in samples}
    shown = {c["span_id"]: c["credit"] for row in step["rollouts"] for c in row["calls"] if c["credit"]}
    assert set(shown) == set(expected) and len(shown) >= 8  # 8 succeeded rollouts, 1 or 2 selected calls each
    for span_id, credit in expected.items():
        view = shown[span_id]
        assert view["return"] == pytest.approx(credit.call_return)
        assert view["rollout_advantage"] == pytest.approx(credit.rollout_advantage)
        assert view["step_advantage"] == pytest.approx(credit.step_advantage)
        assert view["advantage"] == pytest.approx(credit.advantage)
        assert view["anchor_size"] == credit.anchor_size and view["estimator"] == "anchor"
    # the two rollouts of a task saw the same first prompt: every call's anchor state has both
    assert all(view["anchor_size"] == 2 for view in shown.values())
    row = next(r for r in step["rollouts"] if r["task_id"] == "customers-2024")
    page = get(recorded, f"/v1/ui/rollouts/{row['rollout_id']}")
    trained = [call for call in page["calls"] if call["decision"]["selected"]]
    assert [call["credit"]["advantage"] for call in trained] == [shown[c["span_id"]]["advantage"] for c in trained]
    members = {m["rollout_id"] for m in trained[0]["credit"]["anchor_members"]}
    assert row["rollout_id"] in members and len(members) == 2  # itself and the task's other rollout
    assert all(call["credit"] is None for call in page["calls"] if not call["decision"]["selected"])


def test_why_a_rollout_gave_no_sample(recorded: dict[str, Any]) -> None:
    (run,) = get(recorded, "/v1/ui/runs")["runs"]
    rows = get(recorded, f"/v1/ui/runs/{run['run_id']}/train/1")["rollouts"]
    failed = next(r for r in rows if r["status"] == "failed")
    view = get(recorded, f"/v1/ui/rollouts/{failed['rollout_id']}")
    assert view["attempt_id"] == "at-2" and [a["status"] for a in view["attempts"]] == ["failed", "failed"]
    assert "RuntimeError: the agent raised on purpose" in view["no_sample_reason"] and view["samples"] == []
    first_attempt = get(recorded, f"/v1/ui/rollouts/{failed['rollout_id']}", attempt_id="at-1")
    assert first_attempt["attempt_id"] == "at-1"
    succeeded = next(r for r in rows if r["status"] == "succeeded")
    unmatched = get(recorded, f"/v1/ui/rollouts/{succeeded['rollout_id']}", agent_match="nobody")
    assert unmatched["samples"] == [] and "agent_match='nobody' selected none of its" in unmatched["no_sample_reason"]
    every = get(recorded, f"/v1/ui/rollouts/{succeeded['rollout_id']}", agent_match="")
    assert every["agent_match"] is None and all(c["decision"]["selected"] for c in every["calls"])


def test_bad_requests_are_4xx_with_a_message(recorded: dict[str, Any]) -> None:
    http = recorded["http"]
    (run,) = get(recorded, "/v1/ui/runs")["runs"]
    bad_regex = http.get(f"/v1/ui/runs/{run['run_id']}/train/1", params={"agent_match": "(unclosed"})
    assert bad_regex.status_code == 400 and "not a valid regular expression" in bad_regex.text
    assert http.get(f"/v1/ui/runs/{run['run_id']}/train/9").status_code == 404
    assert http.get(f"/v1/ui/runs/{run['run_id']}/train/one").status_code == 400
    assert http.get("/v1/ui/rollouts/ro-missing").status_code == 404
    some = get(recorded, f"/v1/ui/runs/{run['run_id']}/train/1")["rollouts"][0]["rollout_id"]
    assert http.get(f"/v1/ui/rollouts/{some}", params={"attempt_id": "at-9"}).status_code == 404
    assert get(recorded, "/v1/ui/runs")["runs"]  # still serving


def test_rollouts_enqueued_without_run_metadata_are_grouped_by_batch(tmp_path: Path) -> None:
    with EmbeddedCollector.on_sqlite_file(tmp_path / "s.sqlite3") as addresses:
        client = Client(addresses.query)
        for batch in ("b1-aaa", "b2-bbb"):
            client.enqueue([{"input": {"q": i}, "group_id": f"{batch}/t{i}"} for i in range(3)])
        (run,) = httpx.get(addresses.query + "/v1/ui/runs").json()["runs"]
        assert run["run_id"] == "(no run id)"
        assert [(s["step"], s["batch_id"], s["rollouts"]) for s in run["steps"]] == [(1, "b1-aaa", 3), (2, "b2-bbb", 3)]
        rows = httpx.get(addresses.query + "/v1/ui/runs/(no run id)/train/2").json()["rollouts"]
        assert [r["status"] for r in rows] == ["queuing"] * 3 and all(r["samples"] == 0 for r in rows)


def test_a_tokenizer_that_cannot_load_stops_the_collector_at_start(tmp_path: Path) -> None:
    config = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=f"sqlite:///{tmp_path / 's.db'}",
                             tokenizer=str(tmp_path / "missing"))  # fmt: skip
    with pytest.raises(TokenizerUnavailable, match="no tokenizer at"), EmbeddedCollector(config):
        pass


def test_the_weights_version_an_algorithm_records_is_the_policy_version(tmp_path: Path) -> None:
    with EmbeddedCollector.on_sqlite_file(tmp_path / "s.sqlite3") as addresses:
        metadata = {"run_id": "r", "step": 3, "batch_id": "b3", "agent_match": None, "policy_version": 2}
        (record,) = Client(addresses.query).enqueue([{"input": {}, "group_id": "b3/t", "metadata": metadata}])
        (run,) = httpx.get(addresses.query + "/v1/ui/runs").json()["runs"]
        assert [(s["step"], s["policy_versions"]) for s in run["steps"]] == [(3, [2])]
        view = httpx.get(addresses.query + f"/v1/ui/rollouts/{record['rollout_id']}").json()
        assert view["rollout"]["metadata"]["policy_version"] == 2


def test_a_call_recorded_by_the_agents_client_and_the_gateway_is_one_card_with_the_messages(tmp_path: Path) -> None:
    """Through a policy gateway (Trainer.dev(gateway=True), as training runs) each call is recorded twice: the
    instrumented client's span (agent name, messages) and the gateway's (token ids). The view shows one card a
    call, naming the other copy, with the messages; the step page lists one decision a call."""
    import lightning_otel
    from lightning_otel.testing import OpenAITestServer, runtime_agents

    store = tmp_path / "store.sqlite3"
    with OpenAITestServer() as server:
        trainer = lightning_otel.Trainer(
            n_runners=1,
            adapter={"agent_match": "write"},
            progress=False,
            initial_resources={"main_llm": lightning_otel.LLM(server.base_url, "agl-tiny")},
            collector=CollectorConfig.embedded(store_url=f"sqlite:///{store}"),
            runner_options=lightning_otel.RunnerOptions(capture_content=True),
        )  # fmt: skip
        (batch,) = trainer.dev(runtime_agents.four_calls, [{"question": "q1"}], gateway=True, print_spans=False).train
    ((rollout_id, adapted),) = batch.adapted.items()
    assert adapted.diagnostics.duplicate_calls == 4 and len(adapted.triplets) == 2  # each call twice; two `write`
    config = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=f"sqlite:///{store}")
    with EmbeddedCollector(config) as addresses:
        view = httpx.get(f"{addresses.query}/v1/ui/rollouts/{rollout_id}").json()
        run = httpx.get(f"{addresses.query}/v1/ui/runs").json()["runs"][0]
        (summary,) = run["steps"]
        step = httpx.get(f"{addresses.query}/v1/ui/runs/{run['run_id']}/{summary['mode']}/{summary['step']}").json()
    assert len(view["calls"]) == 4
    for call in view["calls"]:
        (copy,) = call["copies"]
        assert copy["service"] != call["service"] and copy["span_id"] != call["span_id"]
        assert call["agent"] in ("write", "check") and call["prompt_token_ids"] and call["output_messages"]
        assert not call["decision"]["reason"].startswith("duplicate")
    (row,) = step["rollouts"]
    assert len(row["calls"]) == 4 and row["llm_calls"] == 4
