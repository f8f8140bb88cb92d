"""A supervised warm start before the RL steps, in the same run: an agent that never calls its tool untrained has
nothing for RL to reinforce until it has seen the format.

    examples = read_warm_start("calls.jsonl")          # chats with their tools (or `lightning-otel export` SFT rows)
    model = warm_start(examples, base, run.warm_start, learning_rate=1e-4, epochs=2)   # -> the folder RL starts from

Examples are OpenAI's chat fine-tuning rows: `{"messages": [..., the reply], "tools": [...]}` (the last message is
the one trained on; `tools` optional, as the request offered them: the chat template renders the prompt the agent's
request would have). An SFT row `lightning-otel export` wrote is such a row (its other fields are ignored); a row
recorded without message text (`"messages": null`, a run with `--no-content`) is refused, naming its line.
The examples are kept in the run's `warm_start/examples.jsonl`, the model in `warm_start/model`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_otel.runtime.task_files import load_tasks


def read_warm_start(path: str | Path) -> list[dict[str, Any]]:
    """The examples of a JSONL, JSON list or parquet file (`load_tasks`' formats), each checked (module docstring)."""
    rows = load_tasks(path)
    examples = []
    for number, row in enumerate(rows, 1):
        messages = row.get("messages")
        if not isinstance(messages, list) or not messages:
            why = "no message text (recorded with --no-content?)" if "messages" in row else 'no "messages" list'
            raise ValueError(f"{path}: row {number} has {why}: a warm-start example is a chat, "
                             "{\"messages\": [..., the reply], \"tools\": [...]}")  # fmt: skip
        if not isinstance(messages[-1], dict) or messages[-1].get("role") != "assistant":
            raise ValueError(f"{path}: row {number}'s last message is not the assistant's reply (the one trained on)")
        tools = row.get("tools")
        if isinstance(tools, str):  # Parquet and datasets keep tools as JSON text
            tools = json.loads(tools) if tools else None
        examples.append({"messages": messages, **({"tools": tools} if tools else {})})
    return examples


def warm_start(
    examples: Sequence[dict[str, Any]],
    base: Path,
    folder: Path,
    *,
    learning_rate: float,
    epochs: float,
    seed: int = 0,
) -> tuple[Path, dict[str, float]]:
    """Fine-tune `base` on the examples into `folder/model` (every weight, TRL's SFTTrainer, the replies only);
    returns the model's folder and the first and last logged loss."""
    from lightning_otel.training.sft import fine_tune

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "examples.jsonl").write_text("".join(json.dumps(example) + "\n" for example in examples),
                                           encoding="utf-8")  # fmt: skip
    model = folder / "model"
    batch_size = min(8, len(examples))
    losses = fine_tune(examples, base, model, epochs=epochs, learning_rate=learning_rate, batch_size=batch_size,
                       seed=seed, trl_args={"logging_steps": 1})  # fmt: skip
    return model, {"examples": float(len(examples)), "first_loss": losses[0] if losses else float("nan"),
                   "last_loss": losses[-1] if losses else float("nan")}  # fmt: skip


__all__ = ["read_warm_start", "warm_start"]
