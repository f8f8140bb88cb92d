"""`lightning-otel demo`: run a small two-agent program under the capture layer and show what it recorded.

A writer drafts a SQL query and a checker reviews it, against the built-in OpenAI-compatible test server (vLLM
format token ids from a tiny offline tokenizer), inside three rollouts. By default the spans travel the way they do
in training: over OTLP/HTTP to an embedded `agl-otel-collector` on loopback, committed to its SQLite store, and
read back through its query API in one call. The output lists, per rollout, the agent and LLM spans with their
token counts and the reward: exactly what a trainer receives. With `--endpoint` the spans are exported to that
OTLP receiver instead (e.g. a running `agl-otel-collector` or Jaeger) and shown from memory.
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from pathlib import Path

from lightning_otel import semconv

TASKS = (
    "names of customers with orders in 2024",
    "count orders per customer",
    "the ten largest orders",
)


def run_demo(endpoint: str | None = None) -> int:
    if endpoint is not None:
        if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
            # --endpoint asks for an export: an inherited "none" would make the closing "exported to" line a lie
            print("--endpoint given: exporting over OTLP although OTEL_TRACES_EXPORTER=none is set")
            os.environ["OTEL_TRACES_EXPORTER"] = "otlp"
        return _run(endpoint, embedded=False)
    try:
        from lightning_otel.collector.server import EmbeddedCollector
    except ImportError:  # the [collector] extra is not installed: show the spans from memory
        return _run(None, embedded=False)
    # a scratch store, removed at exit: a demo run after run must not leave stores behind in the temp folder
    with (
        tempfile.TemporaryDirectory(prefix="agl-demo-") as scratch,
        EmbeddedCollector.on_sqlite_file(Path(scratch) / "collector.sqlite3") as addresses,
    ):
        print(f"embedded agl-otel-collector: OTLP {addresses.otlp_http}, store {addresses.store} (removed at exit)")
        return _run(addresses.otlp_http, embedded=True, query_url=addresses.query)


def _run(endpoint: str | None, *, embedded: bool, query_url: str | None = None) -> int:
    if endpoint is None:
        os.environ.setdefault("OTEL_TRACES_EXPORTER", "none")
    import openai

    import lightning_otel
    from lightning_otel.capture.setup import add_span_processor
    from lightning_otel.testing import OpenAITestServer, SpanCapture

    capture = SpanCapture()
    rollout_ids = [f"demo-rollout-{index}" for index in range(len(TASKS))]
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

        for rollout_id, task in zip(rollout_ids, TASKS, strict=True):
            with lightning_otel.rollout_context(rollout_id, "attempt-1"):
                query = write(task)
                lightning_otel.emit_reward(1.0 if check(query) else 0.0)
        lightning_otel.flush()  # read-your-writes: the collector acknowledged after committing
    if embedded and query_url:
        from lightning_otel.collector import Client

        with Client(query_url) as collector:
            stored = collector.rollouts_spans(rollout_ids)
        print("rollouts read back from the collector's store in one call (what the trainer receives):")
        _print_rollouts(
            {
                rollout: [(s["name"], s["attributes"], s["startTimeUnixNano"]) for s in spans]
                for rollout, spans in stored.items()
            }
        )
        return 0
    _print_rollouts(_by_rollout(capture.spans))
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


def _by_rollout(spans: list) -> dict[str, list[tuple[str, dict, int]]]:
    by_rollout: dict[str, list[tuple[str, dict, int]]] = defaultdict(list)
    for span in spans:
        attributes = dict(span.attributes or {})
        rollout = attributes.get(semconv.AGL_ROLLOUT_ID)
        if rollout:
            by_rollout[str(rollout)].append((span.name, attributes, span.start_time or 0))
    return by_rollout


def _print_rollouts(rollouts: dict[str, list[tuple[str, dict, int]]]) -> None:
    """Each rollout's spans as (name, attributes, start time), in start order."""
    for rollout, members in sorted(rollouts.items()):
        print(f"\nrollout {rollout}: {len(members)} spans")
        for name, a, _ in sorted(members, key=lambda member: member[2]):
            operation = a.get(semconv.GEN_AI_OPERATION_NAME)
            if operation in semconv.LLM_OPERATIONS:
                print(
                    f"  {name:<22} agent={a.get(semconv.GEN_AI_AGENT_NAME)!s:<8} "
                    f"prompt_ids={len(a.get(semconv.AGL_PROMPT_TOKEN_IDS, ()))} "
                    f"response_ids={len(a.get(semconv.AGL_RESPONSE_TOKEN_IDS, ()))} "
                    f"complete={a.get(semconv.AGL_TOKEN_IDS_COMPLETE)}"
                )
            elif name == semconv.REWARD_SPAN_NAME:
                print(f"  {name:<22} value={a.get(semconv.AGL_REWARD_VALUE)}")
            else:
                print(f"  {name}")
