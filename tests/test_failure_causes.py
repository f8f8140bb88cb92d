"""Failures told apart: an infrastructure failure (raised, or swallowed by the agent and seen in its spans) is
retried and never trained; a policy failure (the agent says the model's output is at fault, a context overflow, a
rollout stopped by a no-progress rule) trains with the policy-failure reward; the agent's own error is neither; a
rule of the user's decides first."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

import lightning_otel
from lightning_otel.agent_api import failures
from lightning_otel.runner.failure_causes import cause_of_exception, outcome_of, with_swallowed_failures
from lightning_otel.testing import OpenAITestServer, runtime_agents

REQUEST = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")


def status_error(kind: type[openai.APIStatusError], status: int, message: str) -> openai.APIStatusError:
    return kind(message, response=httpx.Response(status, request=REQUEST), body=None)


@pytest.mark.parametrize(
    ("exc", "cause"),
    [
        (status_error(openai.InternalServerError, 503, "down"), "infrastructure:InternalServerError"),
        (status_error(openai.RateLimitError, 429, "slow down"), "infrastructure:RateLimitError"),
        (openai.APIConnectionError(request=REQUEST), "infrastructure:APIConnectionError"),
        (openai.APITimeoutError(request=REQUEST), "infrastructure:APITimeoutError"),
        (httpx.ConnectError("refused"), "infrastructure:ConnectError"),
        (TimeoutError("tool"), "infrastructure:TimeoutError"),
        (status_error(openai.BadRequestError, 400, "This model's maximum context length is 2048 tokens"),
         "policy:context_overflow"),
        (status_error(openai.BadRequestError, 400, "you must provide a model parameter"),
         "agent_error:BadRequestError"),
        (lightning_otel.PolicyError("no SQL in the answer", "no_sql"), "policy:no_sql"),
        (lightning_otel.InfrastructureError("sandbox crashed", "sandbox"), "infrastructure:sandbox"),
        (KeyError("answer"), "agent_error:KeyError"),
        (httpx.HTTPStatusError("tool", request=REQUEST, response=httpx.Response(502, request=REQUEST)),
         "infrastructure:HTTP_502"),
        (httpx.HTTPStatusError("tool", request=REQUEST, response=httpx.Response(404, request=REQUEST)),
         "agent_error:HTTPStatusError"),
    ],
)  # fmt: skip
def test_the_built_in_rules(exc: BaseException, cause: str) -> None:
    assert cause_of_exception(exc) == cause


def test_a_users_rule_decides_first_and_a_broken_one_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    @lightning_otel.failure_rule
    def sql_errors(exc: BaseException) -> str | None:
        return "policy:sql_error" if isinstance(exc, KeyError) else None

    @lightning_otel.failure_rule
    def broken(exc: BaseException) -> str | None:
        return "neither:thing"

    try:
        assert cause_of_exception(KeyError("x")) == "policy:sql_error"
        assert cause_of_exception(ValueError("x")) == "agent_error:ValueError"  # not the rule's: the built-in ones
        assert "failure rule broken failed" in caplog.text
    finally:
        failures._RULES.remove(sql_errors)
        failures._RULES.remove(broken)


def test_what_each_outcome_reports() -> None:
    common: dict[str, Any] = {"reward": None, "note": None, "exc": None, "tripped": None, "stopped": None,
                              "policy_failure_reward": -0.5}  # fmt: skip
    fine = outcome_of(**{**common, "reward": 1.0})
    assert (fine.status, fine.reward, fine.cause) == ("succeeded", 1.0, None)
    assert with_swallowed_failures(fine, []) is fine
    swallowed = with_swallowed_failures(outcome_of(**{**common, "reward": 0.5}), ["infrastructure:InternalServerError"])
    assert (swallowed.status, swallowed.cause) == ("failed", "infrastructure:InternalServerError")
    looped = outcome_of(**{**common, "tripped": "policy:repeated_completion (3 times in a row)"})
    assert (looped.status, looped.reward, looped.policy_failure) == ("succeeded", -0.5, True)
    # a policy failure that also saw an outage is not trained either: which lowered its reward cannot be told
    assert with_swallowed_failures(looped, ["infrastructure:ConnectError"]).status == "failed"
    stopped = outcome_of(**{**common, "stopped": "runner stopped"})
    assert (stopped.status, stopped.cause) == ("failed", "infrastructure:runner_stopped")
    ended = outcome_of(**{**common, "stopped": "stopped"})  # the queue's word: timed out or cancelled there
    assert (ended.status, ended.cause) == ("failed", "infrastructure:stopped_by_queue")


def test_a_training_retries_infrastructure_failures_and_trains_policy_failures_with_their_reward() -> None:
    failed_once: set[str] = set()

    def faults(body: dict[str, Any]) -> int | None:
        text = body["messages"][-1]["content"]
        if text.startswith("down"):
            return 503  # this task's calls always fail: past its attempts
        if text == "outage 0" and text not in failed_once:
            failed_once.add(text)
            return 503  # once: the swallowing agent carries on without it
        return None

    tasks = [{"question": "outage"}, {"question": "fine"}, {"question": "down"}]
    with OpenAITestServer(fail=faults, latency_s=0.06) as server:
        trainer = lightning_otel.Trainer(
            n_runners=1,
            initial_resources={"main_llm": lightning_otel.LLM(server.base_url, "m")},
            progress=False,
            settings=lightning_otel.RunSettings(max_attempts=2),
        )  # fmt: skip
        swallowing = trainer.fit(runtime_agents.swallowing_agent, tasks).train[0]
        trainer = lightning_otel.Trainer(
            n_runners=1,
            initial_resources={"main_llm": lightning_otel.LLM(server.base_url, "m")},
            progress=False,
            runner_options=lightning_otel.RunnerOptions(limits=lightning_otel.RolloutLimits(max_repeats=3)),
        )  # fmt: skip
        failing = trainer.fit(
            runtime_agents.failing_agent, [{"question": "q", "then": "policy"}, {"question": "q2", "then": "loop"},
                                           {"question": "q3"}],
        ).train[0]  # fmt: skip
    by_task = {record["input"]["question"]: record for record in swallowing.rollouts}
    # the swallowed outage: attempt 1 failed for the infrastructure and was retried; trained with its real reward
    assert (by_task["outage"]["status"], by_task["outage"]["attempts"]) == ("succeeded", 2)
    assert by_task["outage"]["cause"] is None and swallowing.rewards()[by_task["outage"]["rollout_id"]] == 1.0
    assert (by_task["down"]["status"], by_task["down"]["cause"]) == ("failed", "infrastructure:InternalServerError")
    assert by_task["down"]["rollout_id"] not in swallowing.adapted  # never trained as reward 0
    metrics = swallowing.metrics()
    assert (metrics["failed_infrastructure"], metrics["retried"], metrics["policy_failures"]) == (1, 2, 0)
    assert sorted(swallowing.rewards().values()) == [1.0, 1.0]  # no infrastructure failure became a reward
    # policy failures: trained, with the policy-failure reward, their calls the samples
    by_task = {record["input"]["question"]: record for record in failing.rollouts}
    assert by_task["q"]["cause"] == "policy:no_sql" and by_task["q"]["status"] == "succeeded"
    assert by_task["q2"]["cause"].startswith("policy:repeated_completion (3 times in a row)")
    rewards = failing.rewards()
    assert [rewards[by_task[q]["rollout_id"]] for q in ("q", "q2", "q3")] == [0.0, 0.0, 1.0]
    # stopped at the third repeat: a span is read within the span finisher's gather (50 ms) of its call's end, and
    # each call here takes 60 ms, so at most the call already under way when it tripped is a sample too
    assert 3 <= len(failing.adapted[by_task["q2"]["rollout_id"]].triplets) <= 4
    assert failing.metrics()["policy_failures"] == 2


def test_the_watch_reads_calls_tokens_repeats_and_empty_completions_from_ended_spans() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Status, StatusCode

    from lightning_otel import semconv
    from lightning_otel.runner.attempt_watch import AttemptWatch

    provider = TracerProvider()
    watch = AttemptWatch(lightning_otel.RolloutLimits(max_llm_calls=4, max_empty=2, max_repeats=None))
    provider.add_span_processor(watch)
    tracer = provider.get_tracer("test")
    tripped: list[str] = []

    def call(attempt: str, ids: list[int], error: str | None = None) -> None:
        attributes = {semconv.AGL_ROLLOUT_ID: "ro", semconv.AGL_ATTEMPT_ID: attempt,
                      semconv.GEN_AI_OPERATION_NAME: "chat", semconv.AGL_RESPONSE_TOKEN_IDS: ids}  # fmt: skip
        with tracer.start_as_current_span("chat m", attributes=attributes) as span:
            if error:
                span.set_attribute(semconv.ERROR_TYPE, error)
                span.set_status(Status(StatusCode.ERROR))

    calls = watch.watch("ro", "at-1", tripped.append)
    for ids in ([1, 2], [3], [4], [5]):
        call("at-1", ids)
    call("at-9", [1])  # another attempt's: not counted
    assert (calls.llm_calls, calls.completion_tokens, tripped) == (4, 5, [])
    call("at-1", [6])
    assert tripped == ["policy:too_many_llm_calls (over 4)"]
    empties = watch.watch("ro", "at-2", tripped.append)
    call("at-2", [], error="openai.InternalServerError")
    call("at-2", [])
    call("at-2", [])
    assert empties.infrastructure == ["infrastructure:openai.InternalServerError"]
    assert tripped[-1] == "policy:empty_completions (2)"


def test_the_step_line_says_retries_and_failures_by_cause_when_there_are_any() -> None:
    from lightning_otel.training.loop.metrics import console_line

    calm = {"rollout/succeeded": 8.0, "rollout/failed": 0.0, "rollout/retried": 0.0,
            "rollout/failed_infrastructure": 0.0, "rollout/policy_failures": 0.0}  # fmt: skip
    assert console_line(1, calm) == "step 1: ok 8  failed 0"
    rough = {**calm, "rollout/retried": 3.0, "rollout/failed_infrastructure": 1.0, "rollout/policy_failures": 2.0}
    assert console_line(2, rough) == "step 2: ok 8  failed 0  retried 3  infra failed 1  policy failed 2"


def test_calls_that_offered_tools_and_got_none_called_trip_the_no_tool_call_rule() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    from lightning_otel import semconv
    from lightning_otel.capture.llm_call import request_attributes
    from lightning_otel.runner.attempt_watch import AttemptWatch

    offered = request_attributes({"model": "m", "tools": [{"type": "function", "function": {"name": "f"}}] * 2})
    assert offered[semconv.AGL_TOOLS_OFFERED] == 2
    assert semconv.AGL_TOOLS_OFFERED not in request_attributes({"model": "m", "tools": []})
    provider = TracerProvider()
    watch = AttemptWatch(lightning_otel.RolloutLimits(max_without_tool_call=3, max_repeats=None))
    provider.add_span_processor(watch)
    tripped: list[str] = []
    seen = watch.watch("ro", "at-1", tripped.append)

    def call(finish: str, token: int, tools: int = 2) -> None:
        attributes = {semconv.AGL_ROLLOUT_ID: "ro", semconv.AGL_ATTEMPT_ID: "at-1",
                      semconv.GEN_AI_OPERATION_NAME: "chat", semconv.AGL_RESPONSE_TOKEN_IDS: [token],
                      semconv.GEN_AI_RESPONSE_FINISH_REASONS: [finish], **offered}  # fmt: skip
        if not tools:
            attributes.pop(semconv.AGL_TOOLS_OFFERED)
        provider.get_tracer("t").start_span("chat m", attributes=attributes).end()

    for token, finish in enumerate(["stop", "stop", "tool_calls", "stop", "stop"]):
        call(finish, token)
    call("stop", 9, tools=0)  # no tools offered: neither counts nor resets
    assert (seen.without_tool_call, tripped) == (2, [])
    call("stop", 10)
    assert tripped == ["policy:no_tool_call (3 calls in a row offered tools)"]
