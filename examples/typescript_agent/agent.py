"""A TypeScript agent (agent.ts: the Anthropic SDK, OpenTelemetry's Node SDK) as the agent of a rollout: the
program runs unmodified with `npx tsx`, its model calls served by the policy through the gateway's Messages
dialect, its spans sent to the collector inside the rollout. Its agent spans (`planner`, `writer`) are the parents
of its model requests (the undici instrumentation sends their `traceparent`), so the trainer knows which agent made
each call.

    python agent.py --dry-run        # one task against a scripted test server: which calls agent_match selects

The reward: 1.0 when the answer holds the task's word, else half the answer's similarity to it.
"""

from __future__ import annotations

import argparse
import difflib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import lightning_otel as agl

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 300


def run_agent(task: dict[str, Any], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    tsx = HERE / "node_modules" / ".bin" / "tsx"
    if not tsx.exists():
        raise agl.InfrastructureError(f"the TypeScript agent's packages are not installed: run `npm ci` in {HERE}")
    program = {"prompt": task["prompt"], "word": task["word"]}
    return subprocess.run([str(tsx), str(HERE / "agent.ts"), json.dumps(program)], env=env, cwd=HERE,
                          capture_output=True, text=True, timeout=TIMEOUT_S)  # fmt: skip


def reward(task: dict[str, Any], answer: str) -> float:
    word = task["word"]
    if word in answer.lower():
        return 1.0
    return 0.5 * difflib.SequenceMatcher(None, answer.strip().lower(), word.lower()).ratio()


@agl.rollout
def typescript_rollout(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    done = run_agent(task, agl.harness_env(resources["main_llm"], rollout))
    if done.returncode != 0:
        said = done.stderr[-500:]
        if any(sign in said for sign in ("APIConnectionError", "InternalServerError", "ECONNREFUSED", "503")):
            raise agl.InfrastructureError(f"the TypeScript agent could not reach the policy: {said}")
        raise agl.PolicyError(f"the TypeScript agent failed: {said}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])["answer"]
    return reward(task, answer)


def dry_run(agent_match: str) -> int:
    """One task, no training: the test server scripted as a policy whose planner calls the tool and whose writer
    answers, behind the policy gateway (`Trainer.dev(..., gateway=True)`, as training serves it)."""
    from lightning_otel.testing import OpenAITestServer, Reply, ToolCall

    task = json.loads((HERE / "tasks.jsonl").read_text().splitlines()[0])
    script = [Reply(tool_calls=[ToolCall("lookup_word", "{}")]), f"The word is {task['word']}."]
    with OpenAITestServer(replies=script) as server:
        trainer = agl.Trainer(n_runners=1, adapter={"agent_match": agent_match},
                              initial_resources={"main_llm": agl.LLM(server.base_url, "policy")})  # fmt: skip
        result = trainer.dev("agent:typescript_rollout", [task], gateway=True, print_spans=False)
        calls = len(server.requests)
    batch = result.train[0]
    (adapted,) = batch.adapted.values()
    print(f"the TypeScript agent made {calls} model calls; reward {next(iter(batch.rewards().values())):.2f}; "
          f"agents seen: {adapted.diagnostics.agents_seen}; agent_match={agent_match!r} selects "
          f"{len(adapted.triplets)} of {adapted.diagnostics.llm_calls} calls")  # fmt: skip
    return 0 if adapted.triplets else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="one scripted task, no training")
    parser.add_argument("--agent-match", default="^writer$", help="which agent's calls the dry run selects")
    args = parser.parse_args()
    sys.exit(dry_run(args.agent_match) if args.dry_run else parser.print_help())
