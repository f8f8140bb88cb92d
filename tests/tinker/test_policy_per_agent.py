"""A policy per agent: `agent_match` as a mapping of agent patterns to policies. The local engine keeps one LoRA
adapter per policy over one base; the gateway serves each call with its agent's adapter (named by the capture layer's
`x-agl-agent-name` header, or by `model` for a call that names no agent) and records which on the span; each adapter
learns from its own agent's calls only, is checkpointed in its own folder and resumes from it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch

import lightning_otel as agl
from lightning_otel import semconv
from lightning_otel.adapters.policy_match import PolicyMatch
from lightning_otel.collector import Client
from lightning_otel.serving.gateway import GatewayServer, PolicyGateway
from lightning_otel.serving.sampler_api import ReplicaServer
from lightning_otel.testing import SpanCapture
from lightning_otel.testing.tokenizer import build_tokenizer
from lightning_otel.training.loop.backend import Backend
from lightning_otel.training.loop.loop import TrainingLoop
from lightning_otel.training.tinker.engine import EngineSamplerReplica
from lightning_otel.training.tinker.local_engine import LocalEngine
from lightning_otel.training.tinker.types import AdamParams, Datum, SampledSequence

MAPPING = {"^planner$": "planner", "^caller$": "caller"}
TASKS = [{"task_id": f"t{i}", "question": f"Question number {i}?"} for i in range(2)]


def lora_weights(engine: LocalEngine) -> dict[str, torch.Tensor]:
    marker = f".{engine.adapter_name}."
    return {n: p.detach().clone() for n, p in engine.model.named_parameters() if "lora_" in n and marker in n}


def changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(before[name], after[name]) for name in before)


def test_two_adapters_each_learn_from_their_own_agents_calls_served_by_their_own_adapter_and_resume(
    tiny_model_dir: Path, collector: str, tmp_path: Path
) -> None:
    engine = LocalEngine(tiny_model_dir, rank=4, seed=0, log_dir=tmp_path / "run")
    planner, caller = engine.policy_engine("planner"), engine.policy_engine("caller")
    assert engine.policy_engine("planner") is planner  # asked again: the same adapter
    trained_prompts: dict[str, list[tuple[int, ...]]] = {"planner": [], "caller": []}
    for name, policy_engine in (("planner", planner), ("caller", caller)):
        original = policy_engine.forward_backward

        def record(data: Any, loss_fn: str, config: Any = None, *, _name: str = name, _original: Any = original) -> Any:
            trained_prompts[_name].extend(tuple(datum.model_input) for datum in data)
            return _original(data, loss_fn, config)

        policy_engine.forward_backward = record  # type: ignore[method-assign]
    before = {"planner": lora_weights(planner), "caller": lora_weights(caller), "default": lora_weights(engine)}
    options = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=2, group_size=4, max_steps=2, save_every=1),
        sampling=agl.Sampling(max_tokens=8), trackers=agl.Trackers(logger=()),
    )  # fmt: skip
    trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=agl.Tinker(engine, options, learning_rate=1e-2),
                          adapter={"agent_match": MAPPING})  # fmt: skip
    result = trainer.fit("tests.tinker.agents:planner_and_caller_agent", TASKS)

    metrics = [record.metrics for record in result.steps]
    for step in metrics:  # 2 tasks x 4 rollouts, one call of each agent per rollout: 8 datums per policy
        assert step["policy/planner/datums"] == step["policy/caller/datums"] == 8.0
        assert step["policy/planner/skipped"] == step["policy/caller/skipped"] == 0.0
        assert step["policy/planner/samples"] == step["policy/caller/samples"] == 8.0
    # step 2 samples the adapters step 1 trained apart: each call's sampler logprobs are its own adapter's
    assert metrics[1]["policy/planner/async/logprob_gap_staleness_0"] < 1e-3
    assert metrics[1]["policy/caller/async/logprob_gap_staleness_0"] < 1e-3
    after = {"planner": lora_weights(planner), "caller": lora_weights(caller), "default": lora_weights(engine)}
    assert changed(before["planner"], after["planner"]) and changed(before["caller"], after["caller"])
    assert not changed(before["default"], after["default"])  # the base, which served no claimed call, never trains

    client = Client(collector)
    train = [r["rollout_id"] for r in client.queued_rollouts(limit=100) if r["mode"] == "train"]
    spans = client.rollouts_spans(train, latest=True)
    prompts_of: dict[str, set[tuple[int, ...]]] = {"planner": set(), "caller": set()}
    for rollout in spans.values():
        calls = [s for s in rollout if semconv.AGL_RESPONSE_TOKEN_IDS in s["attributes"]]
        assert len(calls) == 4  # two calls, each recorded by the agent's client and by the gateway
        for span in calls:
            attributes = span["attributes"]
            agent = attributes.get(semconv.GEN_AI_AGENT_NAME)
            assert agent in ("planner", "caller"), span
            assert attributes[semconv.AGL_LLM_POLICY] == agent, span  # served by its agent's adapter, said on both
            prompts_of[agent].add(tuple(attributes[semconv.AGL_PROMPT_TOKEN_IDS]))
    for name in ("planner", "caller"):  # each adapter's batches hold its own agent's calls and no other
        assert len(trained_prompts[name]) == 16
        assert all(any(datum[: len(p) - 1] == p[:-1] for p in prompts_of[name]) for datum in trained_prompts[name])
        other = prompts_of["caller" if name == "planner" else "planner"]
        assert not any(datum[: len(p) - 1] == p[:-1] for p in other for datum in trained_prompts[name])

    # the rollout view names each call's policy; the run page has each policy's curve
    view = httpx.get(f"{collector}/v1/ui/rollouts/{train[-1]}", timeout=30).json()
    assert sorted((c["agent"], c["policy"]) for c in view["calls"]) == [("caller", "caller"), ("planner", "planner")]
    only_planner = json.dumps({"^planner$": "planner"})  # the view's agent_match box takes a mapping too
    asked = httpx.get(f"{collector}/v1/ui/rollouts/{train[-1]}", params={"agent_match": only_planner}, timeout=30)
    assert sorted((c["agent"], c["decision"]["selected"]) for c in asked.json()["calls"]) == [
        ("caller", False), ("planner", True)]  # fmt: skip
    bad = httpx.get(f"{collector}/v1/ui/rollouts/{train[-1]}", params={"agent_match": '{"x": "base"}'}, timeout=30)
    assert bad.status_code == 400 and "'base' names the base model" in bad.text
    [run] = httpx.get(f"{collector}/v1/ui/runs", timeout=30).json()["runs"]
    curves = run["policy_curves"]
    assert sorted(curves) == ["caller", "planner"]
    assert [(p["step"], p["samples"], p["skipped"]) for p in curves["planner"]] == [(1, 8.0, 0.0), (2, 8.0, 0.0)]
    assert curves["caller"][0]["reward_mean"] == pytest.approx(metrics[0]["policy/caller/reward_mean"])

    # each policy's state in its own folder of the step's: a PEFT adapter any loader reads, and its optimizer
    assert [Path(path).name for path in result.checkpoints] == ["step-1", "step-2"]
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    for name in ("planner", "caller"):
        folder = Path(result.checkpoints[-1]) / name
        assert (folder / "optimizer.pt").exists()
        loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), folder)
        saved = {n.replace(".default.", f".{name}."): p for n, p in loaded.named_parameters() if "lora_" in n}
        assert all(torch.equal(saved[n], p) for n, p in after[name].items())

    # resume: a new engine over the same folder takes both states up after step 2, and step 3 trains both
    resumed_engine = LocalEngine(tiny_model_dir, rank=4, seed=0, log_dir=tmp_path / "run")
    resumed = agl.Tinker(resumed_engine, dataclasses.replace(options, schedule=agl.Schedule(
        batch_size=2, group_size=4, max_steps=3, resume=True)), learning_rate=1e-2)  # fmt: skip
    trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=resumed, adapter={"agent_match": MAPPING})
    again = trainer.fit("tests.tinker.agents:planner_and_caller_agent", TASKS)
    assert [record.step for record in again.steps] == [3]
    assert again.steps[0].metrics["policy/planner/datums"] == again.steps[0].metrics["policy/caller/datums"] == 8
    for name in ("planner", "caller"):
        assert resumed_engine.policy_engine(name).steps == 3  # two loaded, one more


class _Fixed:
    """A sampler that always answers the same token: which sampler served a request is read off the answer."""

    def __init__(self, token: int) -> None:
        self.version, self.token = 0, token

    def sample(self, prompt: Any, num_samples: int, params: Any) -> list[SampledSequence]:
        return [SampledSequence([self.token], [-0.25], "length")]


def test_the_gateway_serves_each_call_with_its_agents_policy_and_says_which(agl_spans: SpanCapture) -> None:
    tokenizer = build_tokenizer()
    replica = EngineSamplerReplica(_Fixed(11), tokenizer)
    replica.use(_Fixed(22), 4, policy="planner")
    replica.use(_Fixed(33), 4, policy="caller")
    policies = PolicyMatch.parse({**MAPPING, "plan": "caller"})  # "planner" matches two: a conflict
    with ReplicaServer(replica) as upstream:
        gateway = PolicyGateway([upstream.base_url], model="agl-policy", policies=PolicyMatch.parse(MAPPING))
        with GatewayServer(gateway) as server:
            agl.register_trainable_endpoint(server.base_url)
            client = openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0)
            ask = {"model": "anything", "messages": [{"role": "user", "content": "q"}], "max_tokens": 1}
            with agl.rollout_context("ro-routes", "at-1"):
                with agl.agent("planner"):  # the capture layer names the agent in a header: no code change
                    by_planner = client.chat.completions.create(**ask)
                with agl.agent("caller"):
                    by_caller = client.chat.completions.create(**ask)
                with agl.agent("reviewer"):  # no pattern claims it: the base model
                    by_other = client.chat.completions.create(**ask)
            bare = httpx.post(f"{server.base_url}/chat/completions", json={**ask, "model": "caller"}, timeout=30)
            gateway.policies = policies
            clash = httpx.post(f"{server.base_url}/chat/completions", json=ask, timeout=30,
                               headers={"x-agl-agent-name": "planner"})  # fmt: skip
        unknown = httpx.post(f"{upstream.base_url}/chat/completions", json={**ask, "model": "critic"}, timeout=30)
    agl.flush()
    answered = [by_planner.model_extra, by_caller.model_extra, by_other.model_extra]
    assert [a.get(semconv.POLICY_FIELD) for a in answered] == ["planner", "caller", None]
    assert [by_planner.model, by_caller.model, by_other.model] == ["planner", "caller", "agl-policy"]
    tokens = [reply.choices[0].model_extra["token_ids"] for reply in (by_planner, by_caller, by_other)]
    assert tokens == [[22], [33], [11]]
    assert bare.json()[semconv.POLICY_FIELD] == "caller" and bare.json()["choices"][0]["token_ids"] == [33]
    assert clash.status_code == 400 and "matches the patterns of two policies" in clash.json()["error"]["message"]
    assert gateway.policy_conflicts == [clash.json()["error"]["message"]]
    assert unknown.status_code == 404 and "critic" in unknown.json()["error"]["message"]
    calls = agl_spans.llm_spans()
    clients = {span.context.span_id for span in calls}
    gateway_spans = [s for s in calls if s.parent is None or s.parent.span_id in clients]  # under the client's span
    served = sorted((s.attributes.get(semconv.GEN_AI_AGENT_NAME) or "", s.attributes[semconv.AGL_LLM_POLICY])
                    for s in gateway_spans)  # fmt: skip
    assert served == [("", "caller"), ("caller", "caller"), ("planner", "planner"), ("reviewer", "base")]


def test_the_adapter_names_each_samples_policy_and_trains_no_call_another_policy_sampled() -> None:
    def call(span_id: str, agent: str, served: str | None, start: int) -> dict[str, Any]:
        attributes = {semconv.GEN_AI_OPERATION_NAME: "chat", semconv.GEN_AI_AGENT_NAME: agent,
                      semconv.AGL_PROMPT_TOKEN_IDS: [1, 2], semconv.AGL_RESPONSE_TOKEN_IDS: [3],
                      semconv.GEN_AI_RESPONSE_ID: f"r-{span_id}", semconv.AGL_ROLLOUT_ID: "ro-1"}  # fmt: skip
        if served is not None:
            attributes[semconv.AGL_LLM_POLICY] = served
        return {"spanId": span_id, "name": "chat", "startTimeUnixNano": start, "attributes": attributes}

    spans = [call("a", "planner", "planner", 1), call("b", "caller", None, 2), call("c", "caller", "base", 3),
             call("d", "writer", None, 4)]  # fmt: skip
    adapted = agl.TraceToTriplet(agent_match=MAPPING).adapt(spans)
    assert [(t.agent_name, t.policy) for t in adapted.triplets] == [("planner", "planner"), ("caller", "caller")]
    reasons = {d.span_id: d.reason for d in adapted.diagnostics.calls}
    assert "policy 'caller'" in reasons["b"]
    assert "policy 'base' sampled it" in reasons["c"] and adapted.diagnostics.other_policy_calls == 1
    assert reasons["d"].startswith("not selected")

    clashing = agl.TraceToTriplet(agent_match={"plan": "planner", "ner$": "caller"}).adapt(spans[:1])
    assert clashing.triplets == []
    assert "matches the patterns of two policies" in clashing.diagnostics.policy_conflicts[0]
    single = agl.TraceToTriplet(agent_match="planner").adapt(spans)  # the single-policy spelling: as before
    assert [(t.agent_name, t.policy) for t in single.triplets] == [("planner", None)]


@pytest.mark.parametrize(
    ("mapping", "said"),
    [
        ({}, "mapping is empty"),
        ({"(": "p"}, "not a valid regular expression"),
        ({"plan": "has space"}, "a policy name is letters"),
        ({"plan": "base"}, "'base' names the base model"),
    ],
)
def test_a_bad_mapping_is_refused_when_made(mapping: dict[str, str], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        agl.TraceToTriplet(agent_match=mapping)


class _OnePolicy(Backend):
    name = "one"

    def update(self, samples: Any, step: int) -> dict[str, float]:
        return {}


def test_an_algorithm_that_trains_one_policy_refuses_a_mapping_in_one_line_before_anything_starts() -> None:
    with pytest.raises(ValueError, match=r"maps agents to the policies \['planner', 'caller'\].*TrainingLoop trains"):
        agl.Trainer(n_runners=0, algorithm=TrainingLoop(_OnePolicy()), adapter={"agent_match": MAPPING})
    agl.Trainer(n_runners=0, algorithm=TrainingLoop(_OnePolicy()), adapter={"agent_match": "planner"})  # unchanged
    from lightning_otel.training.verl.algorithm import VERL

    assert "designed" in VERL.why_one_policy and "Tinker" in VERL.why_one_policy


def test_adapters_over_one_base_train_apart_and_snapshots_share_the_base(tiny_model_dir: Path, tmp_path: Path) -> None:
    engine = LocalEngine(tiny_model_dir, rank=4, seed=0, log_dir=tmp_path)
    first, second = engine.policy_engine("first"), engine.policy_engine("second")
    before = lora_weights(second)
    datum = Datum([1, 2, 3], {"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]})
    first.forward_backward([datum], "cross_entropy")
    first.optim_step(AdamParams(learning_rate=1e-2))
    assert not changed(before, lora_weights(second))  # training one adapter leaves the other as it was
    sampler = first.save_weights_and_get_sampler("s")
    base = dict(engine.model.named_parameters())
    shared = [n for n, p in sampler._replica.model.named_parameters() if "lora_" not in n and p is base[n]]
    assert shared and len(shared) == sum(1 for n in base if "lora_" not in n)  # one base in memory
    path = first.save_state("step-1")
    assert Path(path) == tmp_path / "checkpoints" / "step-1" / "first"
    first.forward_backward([datum], "cross_entropy")
    first.optim_step(AdamParams(learning_rate=1e-2))
    trained = lora_weights(first)
    first.load_state(path)
    assert changed(trained, lora_weights(first)) and first.steps == 1


def test_a_dry_run_shows_which_policy_each_sample_would_train(capsys: pytest.CaptureFixture[str]) -> None:
    from lightning_otel.testing import OpenAITestServer

    with OpenAITestServer() as server:
        trainer = agl.Trainer(n_runners=1, adapter={"agent_match": MAPPING},
                              initial_resources={"main_llm": agl.LLM(server.base_url, "agl-tiny")})  # fmt: skip
        result = trainer.dev("tests.tinker.agents:planner_and_caller_agent", TASKS[:1], print_spans=False)
    (batch,) = result.train
    assert sorted((t.agent_name, t.policy) for t in batch.triplets()) == [("caller", "caller"), ("planner", "planner")]
    table = capsys.readouterr().out
    assert "policy" in table and "planner" in table and "caller" in table


def test_a_policy_with_nothing_to_learn_is_skipped_and_said_while_the_other_trains(
    tiny_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from lightning_otel.adapters.triplets import Triplet
    from lightning_otel.training.loop.backend import NothingToUpdate
    from lightning_otel.training.loop.samples import Sample
    from lightning_otel.training.tinker.backend import TinkerBackend

    backend = TinkerBackend(LocalEngine(tiny_model_dir, rank=4), loss_fn="importance_sampling", loss_fn_config=None,
                            adam=AdamParams(learning_rate=1e-2))  # fmt: skip
    backend.use_policies(["planner", "caller"])
    before = {name: lora_weights(engine) for name, engine in backend.policies.items()}  # type: ignore[arg-type]

    def sample(rollout: str, policy: str, advantage: float) -> Sample:
        triplet = Triplet([1, 2, 3], [4, 5], [-0.5, -0.5], [1, 1], None, {}, policy, rollout, "a1", [], [],
                          policy=policy)  # fmt: skip
        return Sample(triplet, 0.0, f"task/{policy}", advantage=advantage)

    # the planner's group carries an advantage; the caller's rewards were all equal
    samples = [sample("r1", "planner", 0.5), sample("r2", "planner", -0.5), sample("r1", "caller", 0.0),
               sample("r2", "caller", 0.0)]  # fmt: skip
    metrics = backend.update(samples, step=1)
    assert metrics["policy/planner/skipped"] == 0.0 and metrics["policy/caller/skipped"] == 1.0
    assert metrics["train/policies_trained"] == 1.0 and metrics["train/datums"] == 2.0
    assert "policy caller trained nothing (the others train)" in caplog.text
    assert changed(before["planner"], lora_weights(backend.policies["planner"]))  # type: ignore[arg-type]
    assert not changed(before["caller"], lora_weights(backend.policies["caller"]))  # type: ignore[arg-type]
    with pytest.raises(NothingToUpdate, match=r"policy planner: no datum.*policy caller: no datum"):
        backend.update([s for s in samples if s.advantage == 0.0] + [sample("r3", "planner", 0.0)], step=2)


def test_the_remote_engine_opens_a_training_client_per_policy(tiny_model_dir: Path) -> None:
    from lightning_otel.training.tinker.remote_engine import RemoteEngine
    from tests.tinker.test_datums import RecordingService

    service = RecordingService()
    engine = RemoteEngine("Qwen/Qwen3-4B-Instruct-2507", rank=8, tokenizer=tiny_model_dir, service_client=service)
    critic = engine.policy_engine("critic")
    assert engine.policy_engine("critic") is critic
    created = [args for name, args in service.calls if name == "create_lora_training_client"]
    assert len(created) == 2 and created[0] == created[1]  # the same base and settings, another adapter
    critic.save_weights_and_get_sampler("step-0")
    assert (critic.version, engine.version) == (0, -1)  # versions of their own


def test_asynchronous_training_serves_and_trains_each_policy_within_the_bound(
    tiny_model_dir: Path, collector: str
) -> None:
    options = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=2, group_size=4, max_steps=3), sampling=agl.Sampling(max_tokens=8),
        trackers=agl.Trackers(logger=()), max_staleness=1,
    )  # fmt: skip
    algorithm = agl.Tinker(LocalEngine(tiny_model_dir, rank=4, seed=0), options, learning_rate=1e-2)
    trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=algorithm, adapter={"agent_match": MAPPING})
    result = trainer.fit("tests.tinker.agents:planner_and_caller_agent", TASKS)
    for record in result.steps:
        assert record.metrics["policy/planner/datums"] > 0 and record.metrics["policy/caller/datums"] > 0
        assert record.metrics.get("async/staleness_max", 0.0) <= 1.0
    client = Client(collector)
    spans = client.rollouts_spans([r["rollout_id"] for r in client.queued_rollouts(limit=100)], latest=True)
    calls = [s["attributes"] for rollout in spans.values() for s in rollout]
    served = {(a.get(semconv.GEN_AI_AGENT_NAME), a.get(semconv.AGL_LLM_POLICY)) for a in calls
              if semconv.AGL_RESPONSE_TOKEN_IDS in a}  # fmt: skip
    assert served == {("planner", "planner"), ("caller", "caller")}


def test_a_step_names_as_trained_only_the_samples_of_the_policies_its_update_trained() -> None:
    from lightning_otel.adapters.triplets import Triplet
    from lightning_otel.training.loop.samples import Sample, trained_samples

    def sample(rollout: str, policy: str) -> Sample:
        triplet = Triplet([1], [2], [-0.1], [1], 1.0, {}, policy, rollout, f"at-{rollout}", [], [], policy_version=3,
                          policy=policy)  # fmt: skip
        return Sample(triplet, 1.0, "g")

    samples = [sample("ro-1", "planner"), sample("ro-2", "caller"), sample("ro-3", "planner")]
    skipped_caller = {"policy/planner/skipped": 0.0, "policy/caller/skipped": 1.0}  # caller's groups all tied
    assert trained_samples(samples, skipped_caller) == [("ro-1", "at-ro-1", 3), ("ro-3", "at-ro-3", 3)]
    assert [rollout for rollout, _, _ in trained_samples(samples)] == ["ro-1", "ro-2", "ro-3"]  # one policy: all
