"""Codex, unmodified, as the agent of a rollout: `codex exec TASK` in a fresh folder, its model calls served by the
policy (the gateway speaks OpenAI's Responses API and records the exact token ids). Codex names the thread of each
request in a header, so the trainer knows which calls the main thread made (`main`) and which a sub-agent that
`spawn_agent` started made (`subagent`).

    python agent.py --dry-run        # one task against a scripted test server: which calls agent_match selects

The reward: the task asks for a word written to `answer.txt`; 1.0 when the file holds it, else half the
similarity of the policy's last message to the word (so a policy that cannot yet use tools still gets a signal).
"""

from __future__ import annotations

import argparse
import difflib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning_otel as agl

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 600


def codex_command() -> str:
    """The pinned Codex of this folder (`npm ci` here), else one on PATH."""
    local = HERE / "node_modules" / ".bin" / "codex"
    found = str(local) if local.exists() else shutil.which("codex")
    if not found:
        raise agl.InfrastructureError(f"Codex is not installed: run `npm ci` in {HERE}")
    return found


@dataclass
class CodexRun:
    """What one `codex exec --json` run did, read from its events."""

    exit_code: int
    messages: list[str]  # the agent's messages, in order (the policy's words)
    errors: list[str]  # `error` items and failed turns (Codex's own words)
    stderr: str

    @property
    def infrastructure_failed(self) -> bool:
        """The model's server failed Codex (5xx, unreachable): not the policy's doing."""
        said = " ".join(self.errors).lower()
        return any(sign in said for sign in ("500", "502", "503", "504", "connection", "unreachable", "timed out"))


def run_codex(prompt: str, env: dict[str, str], work: Path) -> CodexRun:
    """`codex exec` in `work`, its model the gateway at `env["OPENAI_BASE_URL"]` (set by `agl.harness_env`)."""
    home = work / ".codex-home"  # no user configuration, no session from another run
    home.mkdir(exist_ok=True)
    provider = {"name": "policy", "base_url": env["OPENAI_BASE_URL"], "wire_api": "responses",
                "env_key": "OPENAI_API_KEY"}  # fmt: skip
    table = "{" + ", ".join(f"{key} = {json.dumps(value)}" for key, value in provider.items()) + "}"
    settings = ["-c", "model_provider=policy", "-c", f"model_providers.policy={table}", "-m", "policy"]
    command = [codex_command(), "exec", "--json", "--skip-git-repo-check", "--sandbox", "workspace-write", *settings,
               prompt]  # fmt: skip
    done = subprocess.run(command, env={**env, "CODEX_HOME": str(home)}, cwd=work, capture_output=True, text=True,
                          timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)  # fmt: skip
    messages, errors = [], []
    for line in done.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        item = event.get("item") or {}
        if event.get("type") == "item.completed" and item.get("type") == "agent_message":
            messages.append(str(item.get("text") or ""))
        elif event.get("type") == "turn.failed":
            errors.append(str((event.get("error") or {}).get("message")))
        elif event.get("type") == "error":
            errors.append(str(event.get("message")))
    return CodexRun(done.returncode, messages, errors, done.stderr)


def reward(task: dict[str, Any], work: Path, run: CodexRun) -> float:
    """1.0 when answer.txt holds the word; else half the similarity of the last message to the word."""
    word = task["word"]
    written = work / "answer.txt"
    if written.exists() and word in written.read_text(errors="replace"):
        return 1.0
    last = next((message for message in reversed(run.messages) if message.strip()), "")
    return 0.5 * difflib.SequenceMatcher(None, last.strip().lower(), word.lower()).ratio()


@agl.rollout
def codex_rollout(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    env = agl.harness_env(resources["main_llm"], rollout)
    with tempfile.TemporaryDirectory(prefix="agl-codex-") as folder:
        work = Path(folder)
        run = run_codex(task["prompt"], env, work)
        if run.infrastructure_failed:
            raise agl.InfrastructureError(f"Codex could not use the policy: {run.errors or run.stderr[-300:]}")
        return reward(task, work, run)  # any other ending is the policy's doing: trained with its reward


def dry_run(agent_match: str) -> int:
    """One task, no training: the test server scripted as a policy that starts a sub-agent, waits for it, then
    writes the file, behind the policy gateway and an embedded collector; prints which calls `agent_match` selects."""
    from lightning_otel.testing import OpenAITestServer, Reply, ToolCall

    task = json.loads((HERE / "tasks.jsonl").read_text().splitlines()[0])
    write = {"cmd": f"printf {task['word']} > answer.txt"}

    def policy(body: dict[str, Any]) -> str | Reply:
        said = [m for m in body["messages"] if m["role"] == "tool"]
        if "Look around" in body["messages"][-1].get("content", ""):  # the sub-agent's own task
            return "The folder is empty."
        if not said:
            return Reply(tool_calls=[ToolCall("spawn_agent", json.dumps({"message": "Look around."}))])
        if len(said) == 1:
            agent_id = json.loads(said[0]["content"])["agent_id"]
            return Reply(tool_calls=[ToolCall("wait_agent", json.dumps({"targets": [agent_id]}))])
        if len(said) == 2:
            return Reply(tool_calls=[ToolCall("exec_command", json.dumps(write))])
        return f"I wrote {task['word']} to answer.txt."

    with OpenAITestServer(replies=policy) as server:
        trainer = agl.Trainer(n_runners=1, adapter={"agent_match": agent_match},
                              initial_resources={"main_llm": agl.LLM(server.base_url, "policy")})  # fmt: skip
        result = trainer.dev("agent:codex_rollout", [task], gateway=True, print_spans=False)
        calls = len(server.requests)
    batch = result.train[0]
    (adapted,) = batch.adapted.values()
    print(f"Codex made {calls} model calls; reward {next(iter(batch.rewards().values())):.2f}; agents seen: "
          f"{adapted.diagnostics.agents_seen}; agent_match={agent_match!r} selects {len(adapted.triplets)} of "
          f"{adapted.diagnostics.llm_calls} calls")  # fmt: skip
    return 0 if adapted.triplets else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="one scripted task, no training")
    parser.add_argument("--agent-match", default="^subagent$", help="which agent's calls the dry run selects")
    args = parser.parse_args()
    sys.exit(dry_run(args.agent_match) if args.dry_run else parser.print_help())
