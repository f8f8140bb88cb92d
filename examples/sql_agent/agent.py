"""A plain-Python SQL agent: a writer drafts a query, a checker reviews it, the writer rewrites it if needed.

Nothing here knows about tracing except the agent names and the reward; run it instrumented with no code change:

    lightning-otel-run --token-ids -- python examples/sql_agent/agent.py --base-url http://127.0.0.1:8000/v1
    python examples/sql_agent/agent.py --dev      # dry run against the built-in test server
"""

from __future__ import annotations

import argparse

import openai

import lightning_otel


def solve(client: openai.OpenAI, model: str, question: str) -> float:
    @lightning_otel.agent("write")
    def write(feedback: str | None = None) -> str:
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
        with lightning_otel.agent("rewrite"):
            query = write(feedback=verdict)
    return 1.0 if query.strip().upper().startswith("SELECT") else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--model", default="agl-tiny")
    parser.add_argument("--dev", action="store_true", help="use the built-in OpenAI-compatible test server")
    args = parser.parse_args()
    questions = ["customers with orders in 2024", "orders per customer"]
    if args.dev:
        from lightning_otel.testing import OpenAITestServer

        def reply(body: dict) -> str:
            text = body["messages"][-1]["content"]
            return "The query is wrong: add a filter." if text.startswith("Check") else "SELECT 1;"

        server = OpenAITestServer(replies=reply).start()
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
