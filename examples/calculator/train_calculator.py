"""Train the calculator agent (calculator_agent.py, LangGraph) with the Tinker-shaped backend on this machine.

    python train_calculator.py dryrun        # 4 problems against a scripted teacher: spans, samples, rewards
    python ../../benchmarks/calculator_probe.py --model smollm2   # the untrained policy: tool calls, accuracy

Only the agent's calls are samples (`agent_match="agent"`: LangGraph's node name); the tool runs are the `tools`
node's. Training SmolLM2 on this task is not in this script yet: the README says what the untrained model does and
what it lacks.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from typing import Any

from calculator_agent import calculator_rollout, word_problems

import lightning_otel as agl
from lightning_otel.testing import OpenAITestServer, Reply, ToolCall

AGENT_MATCH = "agent"


def teacher_reply(body: dict[str, Any]) -> Reply:
    """A scripted teacher: the calculator call the question asks for, then the tool's answer as the final reply."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(content=f"The answer is {last['content']}.")
    question = last["content"]
    a, b = (int(n) for n in re.findall(r"\d+", question)[:2])
    sign = "*" if re.search(r"\b(boxes|rows)\b", question) else "-" if "lost" in question else "+"
    return Reply(tool_calls=[ToolCall("calculate", json.dumps({"expression": f"{a} {sign} {b}"}))])


def dryrun(args: argparse.Namespace) -> int:
    """A few problems through Trainer.dev against the scripted teacher: spans, the agent's samples, rewards."""
    tasks = word_problems(args.n_tasks, seed=args.seed)
    with OpenAITestServer(replies=teacher_reply) as teacher:
        trainer = agl.Trainer(
            n_runners=1,
            adapter={"agent_match": AGENT_MATCH},
            initial_resources={"main_llm": agl.LLM(teacher.base_url, "scripted-teacher")},
        )
        result = trainer.dev(calculator_rollout, tasks, gateway=True, print_spans=args.verbose)
    samples = [triplet for batch in result.train for triplet in batch.triplets()]
    agents = sorted({triplet.agent_name or "?" for triplet in samples})
    rewards = [reward for batch in result.train for reward in batch.rewards().values() if reward is not None]
    print(f"\ndry run: {len(tasks)} problems, mean reward {statistics.fmean(rewards):.2f}, {len(samples)} samples "
          f"from agents {agents}")  # fmt: skip
    # each problem: the call that asks for the calculator and the call that reads its answer
    if agents != [AGENT_MATCH] or len(samples) != 2 * len(tasks) or statistics.fmean(rewards) != 1.0:
        print(f"expected two samples a problem, from the {AGENT_MATCH!r} agent only, all rewarded", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["dryrun"])
    parser.add_argument("--n-tasks", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-v", "--verbose", action="store_true", help="dryrun: print every span")
    args = parser.parse_args()
    return dryrun(args)


if __name__ == "__main__":
    sys.exit(main())
