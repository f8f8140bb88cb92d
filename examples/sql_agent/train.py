"""Run the SQL agent through the Trainer: `--dev` checks it on a few tasks (everything printed), the default runs a
Baseline over the tasks with 2 runner processes and prints what a trainer would learn from.

    python examples/sql_agent/train.py --dev                     # built-in test server, nothing else needed
    python examples/sql_agent/train.py --agent-match '^check$'   # which agents' calls become samples
    python examples/sql_agent/train.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-0.5B-Instruct
"""

from __future__ import annotations

import argparse
import contextlib
import json

from agent import DEV_TASKS, dev_replies, sql_rollout

import lightning_otel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", action="store_true", help="a few tasks through Trainer.dev, every rollout printed")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: the built-in test server)")
    parser.add_argument("--model", default="agl-tiny")
    parser.add_argument("--agent-match", default="write", help="regex on gen_ai.agent.name ('' for all agents)")
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--rollouts-per-task", type=int, default=2)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        base_url = args.base_url
        if base_url is None:
            from lightning_otel.testing import OpenAITestServer

            base_url = stack.enter_context(OpenAITestServer(replies=dev_replies)).base_url
        trainer = lightning_otel.Trainer(
            n_runners=args.runners,
            algorithm=lightning_otel.Baseline(batch_size=4, n_rollouts=args.rollouts_per_task),
            adapter={"agent_match": args.agent_match or None},
            initial_resources={"main_llm": lightning_otel.LLM(base_url, args.model)},
        )
        if args.dev:
            trainer.dev(sql_rollout, DEV_TASKS)
            return
        result = trainer.fit(sql_rollout, DEV_TASKS, DEV_TASKS[:2])
        print(json.dumps(result.metrics(), indent=2))
        for (group, agent_name), triplets in sorted(result.train[-1].groups(by_agent=True).items()):
            print(f"{group:40} {agent_name:8} {len(triplets)} samples, rewards {[t.reward for t in triplets]}")


if __name__ == "__main__":
    main()
