"""What `Trainer.dev` prints about spans and samples: a framework's own model span (ADK's generate_content) is not
shown as an LLM call missing its token ids; every sample shows the reward it will be trained with."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from lightning_otel.runtime.dev_report import _reward_cell, span_tree


def span(span_id: str, parent: str | None, name: str, **attributes: Any) -> dict[str, Any]:
    return {"spanId": span_id, "parentSpanId": parent, "name": name, "startTimeUnixNano": int(span_id, 16),
            "endTimeUnixNano": int(span_id, 16) + 1_000_000, "attributes": attributes}  # fmt: skip


def ids(prompt: list[int], response: list[int]) -> dict[str, list[int]]:
    return {"agl.llm.prompt_token_ids": prompt, "agl.llm.response_token_ids": response}


def rendered(spans: list[dict[str, Any]]) -> list[str]:
    console = Console(width=200, record=True, color_system=None)
    console.print(span_tree(spans, "spans"))  # type: ignore[arg-type]
    return console.export_text().splitlines()


def test_a_framework_model_span_is_not_reported_as_an_llm_call_without_token_ids() -> None:
    lines = rendered(
        [
            span("1", None, "invoke_agent sql_writer", **{"gen_ai.operation.name": "invoke_agent"}),
            span("2", "1", "generate_content openai/policy", **{"gen_ai.operation.name": "generate_content"}),
            span("3", "2", "chat policy", **{"gen_ai.operation.name": "chat", **ids([1, 2], [3])}),
            span("4", "1", "chat other", **{"gen_ai.operation.name": "chat"}),
        ]
    )
    (agent,) = [line for line in lines if "invoke_agent" in line]
    assert "framework span" not in agent and "no token ids" not in agent
    (generate,) = [line for line in lines if "generate_content" in line]
    assert "framework span, not an LLM call" in generate and "no token ids" not in generate
    (with_ids,) = [line for line in lines if "chat policy" in line]
    assert "ids 2+1" in with_ids
    (without,) = [line for line in lines if "chat other" in line]
    assert "no token ids" in without  # a real LLM call without ids is still flagged


def test_the_reward_column_is_the_rollouts_outcome_reward() -> None:
    assert _reward_cell(1.0, None) == "1"  # the reward span landed on a later call: the sample still trains with 1
    assert _reward_cell(0.5, 0.5) == "0.5"
    assert _reward_cell(1.0, 0.25) == "1 (on this call: 0.25)"
    assert _reward_cell(None, None) == "-"
