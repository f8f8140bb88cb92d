"""A run's reward curve as a PNG: the mean training reward per step, its moving average, and the validations
(greedy, and sampled at the training temperature) where they ran. Needs matplotlib (the `[tinker]` and `[demo]`
extras bring it)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path


def write_reward_curve(
    rewards: Sequence[float],
    path: Path,
    *,
    title: str,
    ylabel: str = "reward",
    validations: dict[str, Sequence[tuple[int, float]]] | None = None,
) -> Path:
    """`rewards`: the mean training reward of each step (NaN where a step had none); `validations`: label ->
    [(step, mean reward), ...] drawn as points joined by a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = list(range(1, len(rewards) + 1))
    window = max(1, len(rewards) // 8)
    smoothed = []
    for index in range(len(rewards)):
        recent = [value for value in rewards[max(0, index - window + 1) : index + 1] if not math.isnan(value)]
        smoothed.append(statistics.fmean(recent) if recent else math.nan)
    figure, axis = plt.subplots(figsize=(7, 4))
    axis.plot(steps, rewards, "o-", alpha=0.4, label="mean training reward per step")
    axis.plot(steps, smoothed, "-", linewidth=2, label=f"moving average ({window} steps)")
    for label, points in (validations or {}).items():
        if points:
            axis.plot([step for step, _ in points], [value for _, value in points], "s--", label=label)
    axis.set(xlabel="step", ylabel=ylabel, title=title)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


__all__ = ["write_reward_curve"]
