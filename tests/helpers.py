"""Helpers shared by the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_otel import semconv
from lightning_otel.testing.ports import free_port  # noqa: F401  (the tests import it from here)


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def assert_ids_match_server_response(span: Any, response: dict[str, Any], choice: int = 0) -> None:
    """The span's token ids and logprobs equal exactly what the server sent (a vLLM-format JSON body)."""
    a = attrs(span)
    prompt_ids = response.get("prompt_token_ids") or response["choices"][choice].get("prompt_token_ids")
    assert list(a[semconv.AGL_PROMPT_TOKEN_IDS]) == prompt_ids
    key = semconv.AGL_RESPONSE_TOKEN_IDS if choice == 0 else semconv.AGL_CHOICE_RESPONSE_TOKEN_IDS.format(index=choice)
    assert list(a[key]) == response["choices"][choice]["token_ids"]


def run_benchmark_quick(root: Path, name: str, expected: Sequence[str], timeout: float) -> None:
    """`python -m benchmarks.NAME --quick` from the checkout, as a reader runs it: exits 0 and prints `expected`."""
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--quick"],
        cwd=root, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for line in expected:
        assert line in done.stdout, done.stdout[-3000:]


def assert_staleness_by_the_spans(collector: str, steps: Sequence[Any], max_staleness: int) -> list[int]:
    """Every trained sample of each step (a `StepRecord`) is at most `max_staleness` versions behind the policy the
    step trained, by the versions its LLM spans name (`agl.llm.policy_version`, what the replica that sampled the
    call said), and the step's `async/staleness_max` metric is exactly the oldest of them. Returns each step's oldest
    staleness."""
    from lightning_otel.collector import Client

    oldest = []
    with Client(collector) as client:
        for record in steps:
            trained = int(record.metrics["training/policy_version"])
            spans = client.rollouts_spans(record.rollout_ids)
            sampled_by = {
                span["attributes"][semconv.GEN_AI_RESPONSE_ID]: span["attributes"].get(semconv.AGL_POLICY_VERSION)
                for rollout in spans.values()
                for span in rollout
                if semconv.GEN_AI_RESPONSE_ID in span["attributes"]
            }
            versions = [sampled_by[response_id] for response_id in record.sample_response_ids]
            assert versions and None not in versions, (record.step, versions)
            behind = [trained - int(version) for version in versions]
            assert min(behind) >= 0, f"step {record.step}: a sample newer than the trained v{trained}: {versions}"
            assert max(behind) <= max_staleness, (record.step, trained, versions)
            if max_staleness:
                assert record.metrics["async/staleness_max"] == max(behind), (record.step, record.metrics, behind)
            oldest.append(max(behind))
    return oldest


def dialect_spans(capture: Any) -> list[Any]:
    """The policy gateway's spans of calls it translated (Messages, Responses): clients may record their own."""
    return [span for span in capture.llm_spans() if semconv.AGL_LLM_DIALECT in (span.attributes or {})]


def assert_span_has_the_replicas_ids(span: Any, replica: Any, response_id: str, dialect: str) -> None:
    """The gateway's span of a translated call holds the ids the replica rendered and sampled, for that response."""
    served = replica.served[response_id]
    assert list(span.attributes[semconv.AGL_PROMPT_TOKEN_IDS]) == served.prompt_token_ids
    assert list(span.attributes[semconv.AGL_RESPONSE_TOKEN_IDS]) == served.response_token_ids[0]
    assert span.attributes[semconv.AGL_TOKEN_IDS_COMPLETE] is True
    assert span.attributes[semconv.AGL_LLM_DIALECT] == dialect
    assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == response_id
    assert (span.attributes["agl.rollout.id"], span.attributes["agl.attempt.id"]) == ("ro-1", "at-1")
