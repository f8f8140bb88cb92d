"""What `Trainer.dev` prints: each rollout's span tree, the samples `agent_match` selected, rewards, diagnostics."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from lightning_otel import semconv
from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.flat_span import Span
from lightning_otel.runtime.algorithm import BaselineResult
from lightning_otel.runtime.rollout_batch import BatchResult
from lightning_otel.runtime.sample_diagnosis import why_no_samples


def span_tree(spans: Sequence[Span], title: str) -> Tree:
    """Spans of one rollout as a tree (parents first, by start time); orphans hang from the root."""
    by_id = {span["spanId"]: span for span in spans}
    children: dict[str | None, list[Span]] = {}
    for span in sorted(spans, key=lambda s: s["startTimeUnixNano"]):
        parent = span["parentSpanId"] if span["parentSpanId"] in by_id else None
        children.setdefault(parent, []).append(span)
    root = Tree(title)

    def add(node: Tree, parent: str | None) -> None:
        for span in children.get(parent, []):
            add(node.add(_span_label(span)), span["spanId"])

    add(root, None)
    return root


# The GenAI operation of a framework's model-call spans (ADK's): not an LLM call in our contract, no ids expected.
_MODEL_SPAN_OPERATION = "generate_content"


def _span_label(span: Span) -> str:
    attributes = span["attributes"]
    millis = (span["endTimeUnixNano"] - span["startTimeUnixNano"]) / 1e6
    parts = [f"[bold]{span['name']}[/bold]", f"{millis:.1f} ms"]
    if agent := attributes.get("gen_ai.agent.name"):
        parts.append(f"agent=[cyan]{agent}[/cyan]")
    prompt, response = attributes.get("agl.llm.prompt_token_ids"), attributes.get("agl.llm.response_token_ids")
    if prompt is not None or response is not None:
        parts.append(f"ids {len(prompt or [])}+{len(response or [])}")
    elif attributes.get(semconv.GEN_AI_OPERATION_NAME) in semconv.LLM_OPERATIONS:
        parts.append("[red]no token ids[/red]")
    elif attributes.get(semconv.GEN_AI_OPERATION_NAME) == _MODEL_SPAN_OPERATION:
        # a framework's own span around a model call (ADK's generate_content): its LLM call is a child span
        parts.append("[dim]framework span, not an LLM call[/dim]")
    if "agl.reward.value" in attributes:
        parts.append(f"reward {attributes.get('agl.reward.name', 'primary')}={attributes['agl.reward.value']}")
    return "  ".join(parts)


SAID_CHARS = 300  # of each reply, printed by the dry run


def said(spans: Sequence[Span]) -> list[str]:
    """What each agent said, call by call (the replies on the LLM spans, when message content was recorded)."""
    import json

    lines = []
    calls = [span for span in spans if span["attributes"].get(semconv.GEN_AI_OPERATION_NAME) in semconv.LLM_OPERATIONS]
    for span in sorted(calls, key=lambda s: s["startTimeUnixNano"]):
        output = span["attributes"].get(semconv.GEN_AI_OUTPUT_MESSAGES)
        if output is None:
            continue
        try:
            messages = json.loads(output) if isinstance(output, str) else output
        except ValueError:
            continue
        pieces = []
        for message in messages if isinstance(messages, list) else []:
            for part in message.get("parts") or []:
                if part.get("type") == "text" and part.get("content"):
                    pieces.append(str(part["content"]))
                elif part.get("type") == "tool_call":
                    pieces.append(f"[calls {part.get('name')}({_short(part.get('arguments'))})]")
        text = " ".join(" ".join(pieces).split())
        text = text if len(text) <= SAID_CHARS else text[:SAID_CHARS] + " ..."
        lines.append(f"{span['attributes'].get(semconv.GEN_AI_AGENT_NAME) or '(no agent)'}: {text or '(empty reply)'}")
    return lines


def _short(value: object) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 80 else text[:80] + "..."


def _reward_cell(trained: float | None, on_call: float | None) -> str:
    """The rollout's outcome reward every sample is trained with; a reward recorded on the call itself beside it when
    it differs (a per-call reward that GRPO's outcome-reward training does not use)."""
    text = "-" if trained is None else f"{trained:g}"
    return text if on_call is None or on_call == trained else f"{text} (on this call: {on_call:g})"


class DevReporter:
    def __init__(self, adapter: TraceToTriplet, *, print_spans: bool = True, console: Console | None = None) -> None:
        self.adapter = adapter
        self.print_spans = print_spans
        self.console = console or Console()

    def note(self, message: str) -> None:
        self.console.print(f"[bold yellow]{message}[/bold yellow]")

    def batch(self, mode: str, step: int, result: BatchResult) -> None:
        console = self.console
        trained_rewards = result.rewards()  # what training gives every sample of the rollout: its outcome reward
        for record in result.rollouts:
            rollout_id = record["rollout_id"]
            status = record["status"]
            color = "green" if status == "succeeded" else "red"
            console.rule(f"{mode} rollout {rollout_id}  task {record['task_id']}")
            console.print(
                f"status [{color}]{status}[/{color}]  attempts {record['attempts']}  reward {record['reward']}"
                + (f"\n[yellow]{record['error']}[/yellow]" if record.get("error") else "")
            )
            adapted = result.adapted.get(rollout_id)
            if adapted is None:
                continue
            if self.print_spans:
                console.print(span_tree(result.spans.get(rollout_id, []), f"spans ({len(result.spans[rollout_id])})"))
            table = Table(title=f"samples selected by agent_match={self.adapter.agent_match!r}", title_justify="left")
            policies = self.adapter.policies is not None  # a policy per agent: which one each sample trains
            for column in ("agent", *(("policy",) if policies else ()), "prompt ids", "response ids",
                           "trained tokens", "reward (trained)"):  # fmt: skip
                table.add_column(column)
            for triplet in adapted.triplets:
                table.add_row(
                    str(triplet.agent_name),
                    *((str(triplet.policy),) if policies else ()),
                    str(len(triplet.prompt_token_ids)),
                    str(len(triplet.response_token_ids)),
                    str(sum(triplet.response_mask)),
                    _reward_cell(trained_rewards.get(rollout_id), triplet.reward),
                )
            console.print(table)
            for line in said(result.spans.get(rollout_id, [])):
                console.print(line, markup=False, highlight=False)
            d = adapted.diagnostics
            console.print(
                f"rollout agent {d.rollout_agents}  agents seen {d.agents_seen}  LLM calls {d.llm_calls}  "
                f"matched {d.matched_calls}  "
                f"unmatched {d.unmatched_calls}  without token ids {d.calls_without_token_ids}  "
                f"merge breaks {d.merge_breaks}  final reward {adapted.final_reward}"
                + "".join(f"\n[red]{conflict}[/red]" for conflict in dict.fromkeys(d.policy_conflicts))
            )

    def summary(self, result: BaselineResult, *, late_spans: Callable[[BatchResult], int] | None = None) -> None:
        """The run in one line; when nothing was selected, why (`late_spans`: see `why_no_samples`)."""
        batches = result.train + result.val
        records: list[dict[str, Any]] = [record for batch in batches for record in batch.rollouts]
        rewards = [r for batch in batches for r in batch.rewards().values() if r is not None]
        triplets = sum(len(batch.triplets()) for batch in batches)
        statuses = [record["status"] for record in records]
        self.console.rule("dev summary")
        self.console.print(
            f"rollouts {len(records)}  succeeded {statuses.count('succeeded')}  "
            f"failed {statuses.count('failed')}  timed out {statuses.count('timeout')}  samples {triplets}  "
            f"mean reward {statistics.fmean(rewards) if rewards else float('nan'):.3f}"
        )
        if triplets == 0:
            self.console.print("[bold red]no samples were selected: training these rollouts would train nothing[/]")
            for reason in why_no_samples(batches, self.adapter.agent_match, late_spans=late_spans):
                self.console.print(f"[red]- {reason}[/red]")
