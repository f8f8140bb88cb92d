"""A plain-Python SQL agent: a writer drafts a query, a checker reviews it, the writer rewrites it if needed.

Nothing here knows about tracing except the agent names and the reward; run it instrumented with no code change:

    lightning-otel-run --token-ids -- python examples/sql_agent/agent.py --base-url http://127.0.0.1:8000/v1
    python examples/sql_agent/agent.py --dev      # dry run against the built-in test server
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

import openai

import lightning_otel


def solve(client: openai.OpenAI, model: str, question: str) -> float:
    def write(feedback: str | None = None) -> str:
        # Two agents share this code: the first draft is `write`, a draft after feedback is `rewrite`.
        with lightning_otel.agent("rewrite" if feedback else "write"):
            prompt = f"Write a SQL query: {question}" + (f"\nFeedback: {feedback}" if feedback else "")
            reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}])
            return reply.choices[0].message.content or ""

    @lightning_otel.agent("check")
    def check(query: str) -> str:
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"Check this query: {query}"}]
        )
        return reply.choices[0].message.content or ""

    query = write()
    verdict = check(query)
    if "wrong" in verdict:
        query = write(feedback=verdict)
    return 1.0 if query.strip().upper().startswith("SELECT") else 0.0


@functools.cache
def _client(base_url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)  # one per endpoint, shared by threads


@lightning_otel.rollout
def sql_rollout(task: dict[str, Any], resources: dict[str, Any], rollout: lightning_otel.Rollout) -> float:
    """The same agent as a trainable rollout: the Trainer's runners call it with the policy's endpoint."""
    llm = resources["main_llm"]
    client = _client(llm.get_base_url(rollout.rollout_id, rollout.attempt_id), llm.api_key)
    return solve(client, llm.model, task["question"])


def dev_replies(body: dict) -> str:
    """What the built-in test server answers: the checker rejects queries about orders (one rewrite), and the
    writer gives up on questions about unknown tables (reward 0)."""
    text = body["messages"][-1]["content"]
    if text.startswith("Check"):
        return "The query is wrong: add a filter." if "orders" in text else "Looks right."
    question = text.split(": ", 1)[1].split("\n")[0]
    if "unknown" in question:
        return "I cannot answer that."
    return f"SELECT * FROM t WHERE topic = '{question}'" + (" AND year = 2024;" if "Feedback" in text else ";")


DEV_TASKS = [
    {"id": "customers-2024", "question": "customers with orders in 2024"},
    {"id": "top-products", "question": "top products by revenue"},
    {"id": "unknown-table", "question": "rows of the unknown table"},
    {"id": "orders-per-customer", "question": "orders per customer"},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--model", default="agl-tiny")
    parser.add_argument("--dev", action="store_true", help="use the built-in OpenAI-compatible test server")
    args = parser.parse_args()
    questions = [task["question"] for task in DEV_TASKS]
    if args.dev:
        from lightning_otel.testing import OpenAITestServer

        server = OpenAITestServer(replies=dev_replies).start()
        lightning_otel.register_trainable_endpoint(server.base_url)
        args.base_url = server.base_url
    client = openai.OpenAI(base_url=args.base_url, api_key="unused", max_retries=0)
    for index, question in enumerate(questions):
        with lightning_otel.rollout_context(f"sql-{index}", "attempt-1"):
            reward = solve(client, args.model, question)
            lightning_otel.emit_reward(reward)
        print(f"{question!r}: reward={reward}")
    lightning_otel.flush()


if __name__ == "__main__":
    main()
