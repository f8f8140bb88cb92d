"""What a request's headers say about who sent it, as harnesses send it: the agent that made the call and the
conversation it belongs to. The policy gateway records both on its span of the call (`gen_ai.agent.name`, which
`agent_match` reads; `gen_ai.conversation.id`, which joins the call to the harness's own span of it:
`adapters.harness_calls`).

- Any client: `x-agl-agent-name` names the agent, `x-agl-conversation-id` the conversation.
- Claude Code: a sub-agent's requests carry its agent id (`x-claude-code-agent-id`), every request the session id
  (`x-claude-code-session-id`); the agent's name comes from Claude Code's own spans, by the join.
- Codex: `x-codex-turn-metadata` (JSON) names the thread (`thread_id`: the conversation) and where it came from
  (`thread_source`: `user` for the main thread, named `main` here; `subagent` for a thread `spawn_agent` started;
  its `agent_name` is `/root` for every thread in Codex 0.171, so it names nothing).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lightning_otel import semconv

AGENT_NAME_HEADER = semconv.AGENT_NAME_HEADER
CONVERSATION_HEADERS = ("x-agl-conversation-id", "x-claude-code-agent-id", "x-claude-code-session-id")
CODEX_TURN_METADATA = "x-codex-turn-metadata"
MAIN_THREAD = "main"


def agent_from_headers(headers: Mapping[str, str]) -> str | None:
    """The agent a request names, or None."""
    if name := headers.get(AGENT_NAME_HEADER, "").strip():
        return name
    source = _codex_metadata(headers).get("thread_source")
    if isinstance(source, str) and source:
        return MAIN_THREAD if source == "user" else source
    return None


def conversation_from_headers(headers: Mapping[str, str]) -> str | None:
    """The conversation a request belongs to, or None (the first header present wins)."""
    if found := next(filter(None, map(headers.get, CONVERSATION_HEADERS)), None):
        return found
    thread = _codex_metadata(headers).get("thread_id")
    return thread if isinstance(thread, str) and thread else None


def _codex_metadata(headers: Mapping[str, str]) -> dict[str, Any]:
    raw = headers.get(CODEX_TURN_METADATA)
    if not raw:
        return {}
    try:
        metadata = json.loads(raw)
    except ValueError:  # not ours to refuse: the call is served, only not named
        return {}
    return metadata if isinstance(metadata, dict) else {}
