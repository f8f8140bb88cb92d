"""What a finished run leaves and says: the reward curve, the verdict (also as verdict.json), and the closing lines
that name the model folder, the curve, the metrics and the commands to look at the run.

    lines = close_run(folder, plan, verdict, model=folder.model, program="lightning-otel", store_shown="runs/ID")
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lightning_otel.runs.plan import Plan
from lightning_otel.runs.reward_curve import write_reward_curve
from lightning_otel.runs.run_folder import RunFolder
from lightning_otel.runs.verdict import Verdict


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's lines (none when there is no file)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def draw_curve(folder: RunFolder, plan: Plan) -> Path | str:
    """The run's reward curve from its metrics.jsonl (what a failed run logged too); or why none was drawn."""
    lines = read_metrics(folder.metrics)
    steps = [line for line in lines if "rollout/reward_mean" in line]
    if not steps:
        return "not drawn (no step logged a reward)"
    rewards = [float(line["rollout/reward_mean"]) for line in steps]

    def points(key: str) -> list[tuple[int, float]]:
        return [(int(line["step"]), float(line[key])) for line in lines if key in line]

    validations = {"validation, greedy": points("val/reward_mean"),
                   f"validation, temperature {plan.temperature:g}": points("val_sampled/reward_mean")}  # fmt: skip
    try:
        return write_reward_curve(rewards, folder.curve, validations=validations,
                                  title=f"{folder.run_id}: {plan.algorithm} on {plan.model}")  # fmt: skip
    except ImportError:
        return "not drawn (pip install matplotlib)"


def trained_steps(folder: RunFolder) -> tuple[int, int]:
    """(steps that trained, steps recorded) in the run's metrics.jsonl: every start's, a resumed run's too."""
    logged = [line for line in read_metrics(folder.metrics) if "training/skipped_step" in line]
    return sum(1 for line in logged if not line["training/skipped_step"]), len(logged)


def close_run(
    folder: RunFolder,
    plan: Plan,
    verdict: Verdict,
    *,
    model: Path | None,
    program: str,
    store_shown: str | None,
) -> list[str]:
    """The closing lines (and verdict.json, the curve): whether it learned, then where everything is."""
    curve = draw_curve(folder, plan)
    folder.write_json(folder.verdict, verdict.as_json())
    trained, logged = trained_steps(folder)
    lines = [f"trained {trained} of {logged} steps ({plan.algorithm}, {plan.model}); verdict:", *verdict.lines()]
    shown = folder.path
    lines.append(f"model:    {model if model is not None else 'none written'}")
    lines.append(f"curve:    {curve}")
    lines.append(f"metrics:  {folder.metrics}  (settings.json, verdict.json beside it)")
    if store_shown is not None:
        lines.append(f"see it:   {program} ui {store_shown}   (the rollout view: runs, steps, span trees)")
        lines.append(f"export:   {program} export {store_shown} {shown / 'sft.jsonl'}   (or --shape pairs, rollouts)")
    return lines


__all__ = ["close_run", "draw_curve", "trained_steps"]
