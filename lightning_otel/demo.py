"""`lightning-otel demo`: run a small two-agent program under the capture layer and show what it recorded.

A writer drafts a SQL query and a checker reviews it, against the built-in OpenAI-compatible test server (vLLM
format token ids from a tiny offline tokenizer), inside three rollouts. The output lists, per rollout, the agent
and LLM spans with their token counts and the reward: exactly what a trainer receives. With `--endpoint` the
spans are also exported over OTLP (e.g. to `agl-otel-collector` or Jaeger).
"""

from __future__ import annotations

import os
from collections import defaultdict

from lightning_otel import semconv

TASKS = (
    "names of customers with orders in 2024",
    "count orders per customer",
    "the ten largest orders",
)


def run_demo(endpoint: str | None = None) -> int:
    if endpoint is None:
        os.environ.setdefault("OTEL_TRACES_EXPORTER", "none")
    import openai

    import lightning_otel
    from lightning_otel.testing import OpenAITestServer, SpanCapture
    from lightning_otel.tracing import add_span_processor

    capture = SpanCapture()
    with OpenAITestServer(replies=_scripted_reply) as server:
        lightning_otel.instrument(
            endpoint=endpoint, service_name="lightning-otel-demo", token_id_endpoints=f"^{server.base_url}"
        )
        add_span_processor(capture)
        client = openai.OpenAI(base_url=server.base_url, api_key="demo", max_retries=0)

        @lightning_otel.agent("writer")
        def write(task: str) -> str:
            reply = client.chat.completions.create(
                model="agl-tiny", messages=[{"role": "user", "content": f"Write a SQL query: {task}"}]
            )
            return reply.choices[0].message.content or ""

        @lightning_otel.agent("checker")
        def check(query: str) -> bool:
            reply = client.chat.completions.create(
                model="agl-tiny", messages=[{"role": "user", "content": f"Check this query: {query}"}]
            )
            return "correct" in (reply.choices[0].message.content or "")

        for index, task in enumerate(TASKS):
            with lightning_otel.rollout_context(f"demo-rollout-{index}", "attempt-1"):
                query = write(task)
                lightning_otel.emit_reward(1.0 if check(query) else 0.0)
        lightning_otel.flush()
    _print_rollouts(capture.spans)
    if endpoint:
        print(f"\nSpans were also exported to {endpoint} (service.name=lightning-otel-demo).")
    return 0


def _scripted_reply(body: dict) -> str:
    prompt = str(body["messages"][-1]["content"])
    if prompt.startswith("Check"):
        return "The query is correct." if "ORDER BY" not in prompt else "The query is wrong: rewrite it."
    if "count" in prompt:
        return "SELECT customer_id, COUNT(*) FROM orders GROUP BY customer_id;"
    if "largest" in prompt:
        return "SELECT * FROM orders ORDER BY total DESC LIMIT 10;"
    return "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders WHERE year = 2024);"


def _print_rollouts(spans: list) -> None:
    by_rollout: dict[str, list] = defaultdict(list)
    for span in spans:
        rollout = (span.attributes or {}).get(semconv.AGL_ROLLOUT_ID)
        if rollout:
            by_rollout[str(rollout)].append(span)
    for rollout, members in sorted(by_rollout.items()):
        print(f"\nrollout {rollout}: {len(members)} spans")
        for span in sorted(members, key=lambda s: s.start_time or 0):
            a = span.attributes or {}
            operation = a.get(semconv.GEN_AI_OPERATION_NAME)
            if operation in semconv.LLM_OPERATIONS:
                print(
                    f"  {span.name:<22} agent={a.get(semconv.GEN_AI_AGENT_NAME)!s:<8} "
                    f"prompt_ids={len(a.get(semconv.AGL_PROMPT_TOKEN_IDS, ()))} "
                    f"response_ids={len(a.get(semconv.AGL_RESPONSE_TOKEN_IDS, ()))} "
                    f"complete={a.get(semconv.AGL_TOKEN_IDS_COMPLETE)}"
                )
            elif span.name == semconv.REWARD_SPAN_NAME:
                print(f"  {span.name:<22} value={a.get(semconv.AGL_REWARD_VALUE)}")
            else:
                print(f"  {span.name}")
