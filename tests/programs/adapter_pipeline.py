"""A two-agent rollout through the whole pipeline: instrumented OpenAI client -> OTLP -> embedded collector ->
Client -> TraceToTriplet. Prints the server's token ids and the adapter's output as JSON (tests compare them)."""

from __future__ import annotations

import json
import sys
import tempfile

import openai

import lightning_otel
from lightning_otel.adapters.messages import TraceToMessages
from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.collector import Client, CollectorConfig, EmbeddedCollector
from lightning_otel.testing import OpenAITestServer

TOOL = {"type": "function", "function": {"name": "run_sql", "description": "Run a query",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}  # fmt: skip


def main() -> None:
    store = f"sqlite:///{tempfile.mkdtemp()}/collector.sqlite3"
    config = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=store)
    with EmbeddedCollector(config) as addresses, OpenAITestServer(replies=["SELECT 1;", "SELECT 2;", "ok"]) as server:
        lightning_otel.instrument(
            endpoint=addresses.otlp_http, token_id_endpoints=f"^{server.base_url}", capture_content=True
        )
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        served = []

        def chat(messages: list[dict], **tools: list[dict]) -> str:
            reply = client.chat.completions.create(model="m", messages=messages, **tools)
            served.append(
                {"prompt": reply.model_extra["prompt_token_ids"], "response": reply.choices[0].model_extra["token_ids"]}
            )
            return reply.choices[0].message.content or ""

        with lightning_otel.rollout_context("rollout-1", "attempt-1"):
            with lightning_otel.agent("writer"):
                messages = [{"role": "user", "content": "write the query"}]
                first = chat(messages)
                again = [*messages, {"role": "assistant", "content": first}, {"role": "user", "content": "once more"}]
                chat(again, tools=[TOOL])  # the example carries the tools the request offered
            with lightning_otel.agent("checker"):
                chat([{"role": "user", "content": "check it"}])
            lightning_otel.emit_reward(1.0)
        lightning_otel.flush()
        spans = Client(addresses.query).rollout_spans("rollout-1")
    out: dict = {"served": served}
    for mode in ("transition", "trajectory"):
        adapted = TraceToTriplet(agent_match="^writer$", mode=mode).adapt(spans)
        out[mode] = {
            "triplets": [
                {
                    "prompt": t.prompt_token_ids,
                    "response": t.response_token_ids,
                    "mask": t.response_mask,
                    "logprobs": t.response_logprobs,
                    "agent": t.agent_name,
                    "rollout": t.rollout_id,
                    "reward": t.reward,
                }
                for t in adapted.triplets
            ],
            "final_reward": adapted.final_reward,
            "diagnostics": {
                "agents_seen": adapted.diagnostics.agents_seen,
                "matched": adapted.diagnostics.matched_calls,
                "unmatched": adapted.diagnostics.unmatched_calls,
                "merge_breaks": adapted.diagnostics.merge_breaks,
            },
        }
    out["messages"] = TraceToMessages(agent_match="^writer$").adapt(spans)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
