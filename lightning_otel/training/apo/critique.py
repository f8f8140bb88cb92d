"""Agent Lightning's two LLM steps of APO, written from the traces: a textual gradient (a critique of the prompt,
from rollouts run with it: each one's reward, status, error and the conversation its LLM calls had, as the spans
recorded it) and an edit (the critique applied to the prompt). The prompts below are ours; the method is
ProTeGi's/TextGrad's as Agent Lightning implemented it."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_otel.training.apo.chat_model import ChatModel

MAX_MESSAGE_CHARS = 800  # each message as the critique model sees it
MAX_ROLLOUT_CHARS = 4000  # each rollout's conversation

GRADIENT_SYSTEM = (
    "You review the prompt template an AI agent runs with. You get the template and rollouts of the agent run "
    "with it: each rollout's reward (higher is better), its status, and the conversation its LLM calls had, as "
    "recorded in its traces. Write a short critique: what in the template led to the low-reward rollouts, and "
    "which concrete changes to the template would raise the reward. Do not write the new template."
)
EDIT_SYSTEM = (
    "You edit prompt templates. Apply the critique to the template. Reply with the new template only: no "
    "commentary, no code fences. Keep every placeholder in braces exactly as it is ({placeholders}); add no "
    "other braces."
)


@dataclass(slots=True)
class RolloutReport:
    """One rollout as APO reads it: its task's place in the batch, outcome and conversation (from its spans)."""

    task: Any
    rollout_id: str
    status: str
    reward: float | None
    error: str | None = None
    conversations: list[list[dict[str, Any]]] = field(default_factory=list)  # each selected call: input + reply

    @property
    def score(self) -> float:
        """What the search compares: the reward, 0 for a rollout that failed or gave none (Agent Lightning's)."""
        return float(self.reward) if self.reward is not None else 0.0


def placeholders(template: str) -> set[str]:
    """The f-string fields of a template (`{date}`, `{task[x]}` -> date, task)."""
    names = set()
    for _, name, _, _ in string.Formatter().parse(template):
        if name is not None:
            names.add(re.split(r"[.\[]", name, maxsplit=1)[0])
    return names


def _text(content: Any) -> str:
    text = content if isinstance(content, str) else str(content)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " [...]"


def render_rollout(number: int, report: RolloutReport) -> str:
    lines = [f"### Rollout {number}: reward {report.reward if report.reward is not None else 'none'} "
             f"({report.status}{': ' + report.error if report.error else ''})"]  # fmt: skip
    body = []
    for call, messages in enumerate(report.conversations, start=1):
        body.append(f"-- LLM call {call}")
        for message in messages:
            role = message.get("role", "?")
            if message.get("tool_calls"):
                calls = ", ".join(
                    f"{c['function']['name']}({c['function']['arguments']})" for c in message["tool_calls"]
                )
                body.append(f"[{role}] tool calls: {_text(calls)}")
            if message.get("content") is not None:
                body.append(f"[{role}] {_text(message['content'])}")
    conversation = "\n".join(body) or "(no LLM call recorded its messages)"
    if len(conversation) > MAX_ROLLOUT_CHARS:
        conversation = conversation[:MAX_ROLLOUT_CHARS] + "\n[... cut]"
    return "\n".join([*lines, conversation])


def textual_gradient(
    chat: ChatModel, model: str, template: str, reports: Sequence[RolloutReport], temperature: float
) -> str:
    experiments = "\n\n".join(render_rollout(n, report) for n, report in enumerate(reports, start=1))
    messages = [
        {"role": "system", "content": GRADIENT_SYSTEM},
        {"role": "user", "content": f"Prompt template:\n<template>\n{template}\n</template>\n\n{experiments}"},
    ]
    return chat.complete(model, messages, temperature).strip()


def apply_edit(chat: ChatModel, model: str, template: str, critique: str, temperature: float) -> str:
    names = ", ".join("{" + name + "}" for name in sorted(placeholders(template))) or "none"
    messages = [
        {"role": "system", "content": EDIT_SYSTEM.format(placeholders=names)},
        {"role": "user", "content": f"Template:\n<template>\n{template}\n</template>\n\nCritique:\n{critique}"},
    ]
    return strip_fences(chat.complete(model, messages, temperature))


def strip_fences(text: str) -> str:
    """The template out of a reply that wrapped it anyway (```...``` or <template>...</template>)."""
    text = text.strip()
    fenced = re.fullmatch(r"```[\w-]*\n(.*?)\n?```", text, flags=re.S)
    if fenced:
        return fenced.group(1).strip()
    tagged = re.fullmatch(r"<template>\s*(.*?)\s*</template>", text, flags=re.S)
    return tagged.group(1) if tagged else text
