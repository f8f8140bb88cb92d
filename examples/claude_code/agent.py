"""Claude Code, unmodified, as the agent of a rollout: `claude -p TASK` in a fresh folder, its model calls served by
the policy (the gateway speaks Anthropic's Messages API and records the exact token ids), its own spans sent to
the collector, so the trainer knows which calls the main thread made and which a sub-agent made (`Explore`, ...).

    python agent.py --dry-run        # one task against a scripted test server: what Claude Code sent and printed

The reward: the task asks for a word written to `answer.txt`; 1.0 when the file holds it, else half the
similarity of the policy's last reply to the word (so a policy that cannot yet use tools still gets a signal).
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
TOOLS = "Agent,Bash,Read,Write"  # what the policy may use; fewer tools, a shorter prompt
SYSTEM_PROMPT = "You are a careful coding agent. Do what the user asks in the working folder, then say what you did."
TIMEOUT_S = 600


def claude_command() -> str:
    """The pinned Claude Code of this folder (`npm ci` here), else one on PATH."""
    local = HERE / "node_modules" / ".bin" / "claude"
    found = str(local) if local.exists() else shutil.which("claude")
    if not found:
        raise agl.InfrastructureError(f"Claude Code is not installed: run `npm ci` in {HERE}")
    return found


@dataclass
class ClaudeRun:
    """What one `claude -p` run did, read from its stream-json output."""

    exit_code: int
    replies: list[str]  # the main thread's replies, in order (the policy's words; Claude Code's own notes left out)
    result: dict[str, Any]  # the final `result` event (`is_error`, `api_error`, `api_error_status`, `num_turns`, ...)
    stderr: str

    @property
    def infrastructure_failed(self) -> bool:
        """The model's server failed Claude Code (5xx, unreachable): not the policy's doing."""
        status = self.result.get("api_error_status")
        unreachable = "connection" in str(self.result.get("api_error") or "").lower()
        return (isinstance(status, int) and status >= 500) or unreachable or (self.exit_code != 0 and not self.result)


def run_claude(prompt: str, env: dict[str, str], work: Path, max_turns: int = 6) -> ClaudeRun:
    command = [claude_command(), "-p", prompt, "--permission-mode", "bypassPermissions", "--max-turns",
               str(max_turns), "--system-prompt", SYSTEM_PROMPT, "--tools", TOOLS,
               "--output-format", "stream-json", "--verbose"]  # fmt: skip
    env = {**env, "HOME": str(work / ".home")}  # no user settings, no memory from another run
    (work / ".home").mkdir(exist_ok=True)
    done = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True, timeout=TIMEOUT_S)
    replies, result = [], {}
    for line in done.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") == "result":
            result = event
        elif event.get("type") == "assistant" and not event.get("is_api_error_message"):
            if event.get("parent_tool_use_id") is not None:  # a sub-agent's, not the main thread's
                continue
            blocks = event["message"].get("content") or []
            replies.append("".join(b.get("text", "") for b in blocks if b.get("type") == "text"))
    return ClaudeRun(done.returncode, replies, result, done.stderr)


def reward(task: dict[str, Any], work: Path, run: ClaudeRun) -> float:
    """1.0 when answer.txt holds the word; else half the similarity of the last reply to the word."""
    word = task["word"]
    written = work / "answer.txt"
    if written.exists() and word in written.read_text(errors="replace"):
        return 1.0
    last = next((reply for reply in reversed(run.replies) if reply.strip()), "")
    return 0.5 * difflib.SequenceMatcher(None, last.strip().lower(), word.lower()).ratio()


@agl.rollout
def claude_code_rollout(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    env = agl.harness_env(resources["main_llm"], rollout)
    with tempfile.TemporaryDirectory(prefix="agl-claude-") as folder:
        work = Path(folder)
        run = run_claude(task["prompt"], env, work)
        if run.infrastructure_failed:
            raise agl.InfrastructureError(f"Claude Code could not use the policy: {run.result or run.stderr[-300:]}")
        # any other error is the policy's doing (a reply cut at the token limit, a prompt over the context, too many
        # turns): trained with the reward of what it did
        return reward(task, work, run)


def dry_run(agent_match: str) -> int:
    """One task, no training: the test server scripted as a policy that asks the Explore sub-agent, then writes the
    file, behind the policy gateway and an embedded collector; prints which calls `agent_match` selects."""
    from lightning_otel.testing import OpenAITestServer, Reply, ToolCall

    task = json.loads((HERE / "tasks.jsonl").read_text().splitlines()[0])
    explore = {"description": "look around", "prompt": "List the files here.", "subagent_type": "Explore",
               "run_in_background": False}  # fmt: skip
    script = [Reply(tool_calls=[ToolCall("Agent", json.dumps(explore))]), "The folder is empty.",
              Reply(tool_calls=[ToolCall("Write", json.dumps({"file_path": "answer.txt", "content": task["word"]}))]),
              f"I wrote {task['word']} to answer.txt."]  # fmt: skip
    with OpenAITestServer(replies=script) as server:
        trainer = agl.Trainer(n_runners=1, adapter={"agent_match": agent_match},
                              initial_resources={"main_llm": agl.LLM(server.base_url, "policy")})  # fmt: skip
        result = trainer.dev("agent:claude_code_rollout", [task], gateway=True, print_spans=False)
        calls = len(server.requests)
    batch = result.train[0]
    (adapted,) = batch.adapted.values()
    print(f"Claude Code made {calls} model calls; reward {next(iter(batch.rewards().values())):.2f}; agents seen: "
          f"{adapted.diagnostics.agents_seen}; agent_match={agent_match!r} selects {len(adapted.triplets)} of "
          f"{adapted.diagnostics.llm_calls} calls")  # fmt: skip
    return 0 if adapted.triplets else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="one scripted task, no training")
    parser.add_argument("--agent-match", default="^Explore$", help="which agent's calls the dry run selects")
    args = parser.parse_args()
    sys.exit(dry_run(args.agent_match) if args.dry_run else parser.print_help())
