"""What the rollout view (`/ui`) shows of each trained call's credit: its return, `A_rollout`, `A_step` and its
anchor group (size, and the other members to link to), computed with the trainer's own arithmetic
(`lightning_otel.adapters.credit`) over the call's GRPO group, from the estimator settings the run recorded on its
rollouts (`metadata["estimator"]`). A run that recorded none (an estimator the view cannot rebuild, or an older
run) shows no credit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightning_otel.adapters.credit import CreditInput, assign_credit, settings_from
from lightning_otel.adapters.triplets import AdaptedRollout
from lightning_otel.collector.queue.queue_reads import get_rollouts
from lightning_otel.collector.stores.store import StateTransaction


def group_records(tx: StateTransaction, group_id: str) -> list[dict[str, Any]]:
    """Every rollout of one GRPO group (a task in one step), with its final attempt's id."""
    ids = [row[0] for row in tx.execute("SELECT rollout_id FROM agl_rollouts WHERE group_id = ?", (group_id,))]
    return get_rollouts(tx, ids)


def credits_by_span(
    entries: Sequence[tuple[Mapping[str, Any], AdaptedRollout | None]], estimator: Mapping[str, Any] | None
) -> dict[str, dict[str, Any]]:
    """span id -> the credit of the sample it belongs to, for every trained call of `entries` (rollout records with
    their adapted spans; succeeded and rewarded ones are trained, as the loop does)."""
    settings = settings_from(estimator)
    if settings is None or estimator is None:
        return {}
    per_agent = bool(estimator.get("group_by_agent"))
    items: list[CreditInput] = []
    for record, adapted in entries:
        if adapted is None or record["status"] != "succeeded" or record["reward"] is None:
            continue
        for triplet in adapted.triplets:
            group = str(record["group_id"]) + (f"/{triplet.agent_name}" if per_agent else "")
            items.append(
                CreditInput(group, record["rollout_id"], float(record["reward"]), adapted.step_rewards_total, triplet)
            )
    credits = assign_credit(items, settings)
    members: dict[str, list[dict[str, str]]] = {}
    for item, credit in zip(items, credits, strict=True):
        span_id = item.triplet.span_ids[0]  # type: ignore[union-attr]
        members.setdefault(credit.anchor, []).append({"rollout_id": item.rollout, "span_id": span_id})
    shown: dict[str, dict[str, Any]] = {}
    for item, credit in zip(items, credits, strict=True):
        view = {
            **credit.to_json(),
            "estimator": settings.mode,
            "step_weight": settings.step_weight,
            "anchor_key": estimator.get("anchor_key"),  # a user's normaliser: the view groups by exact tokens
            "anchor_members": members[credit.anchor] if settings.mode == "anchor" else [],
        }
        for span_id in item.triplet.span_ids:  # type: ignore[union-attr]
            shown[span_id] = view
    return shown
