"""An answer the agent never received is not trained: the agent's client retried after its connection was cut
halfway through the answer, so the policy gateway recorded two answers under one call of the agent's; the one the
agent read is the call's sample, the cut one is said as undelivered (found by the chaos run, benchmarks/chaos.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import lightning_otel as agl
from lightning_otel.collector import Client
from lightning_otel.testing.fault_proxy import FaultProxy
from lightning_otel.training.loop.loop import TrainingLoop
from lightning_otel.training.loop.schedule import Schedule
from tests.training.backends import RecordingBackend


def test_a_cut_answer_the_client_retried_is_not_a_sample(collector: str, tmp_path: Path) -> None:
    with FaultProxy() as proxy:
        proxy.cut_next(1)  # the first call's answer: cut halfway, after the policy generated it
        tasks = [{"task_id": "t0", "word": "fruit", "proxy": proxy.url}]
        options = agl.TrainingOptions(schedule=Schedule(batch_size=1, group_size=2, max_steps=1),
                                      sampling=agl.Sampling(max_tokens=16))  # fmt: skip
        trainer = agl.Trainer(n_runners=1, collector=collector, algorithm=TrainingLoop(RecordingBackend(tmp_path),
                              options), adapter={"agent_match": "writer"}, progress=False)  # fmt: skip
        # the test server's replies tie every group on this reward: the step trains nothing, its samples counted
        with pytest.raises(agl.NothingTrained, match=r"2 rollouts \(0 failed\), 2 samples selected"):
            trainer.fit("benchmarks._chaos_agent:chaos_agent", tasks)
    assert proxy.counts["cut"] == 1
    client = Client(collector)
    undelivered = []
    for rollout in [record["rollout_id"] for record in client.rollouts()]:
        spans = client.rollout_spans(rollout, latest=True)
        llm_spans = [s for s in spans if (s.get("attributes") or {}).get("gen_ai.operation.name") == "chat"]
        adapted = agl.TraceToTriplet(agent_match="writer").adapt(spans)
        assert len(adapted.triplets) == 1, (rollout, len(llm_spans))  # the answer the agent read, once
        undelivered += [d for d in adapted.diagnostics.calls if d.why[0] == "undelivered"]
    (cut,) = undelivered  # the cut answer: not trained, and said so
    assert "the agent never received this answer" in cut.reason and not cut.selected
