"""Agent Lightning's APO tutorial driver, with `import lightning_otel as agl` in place of its import: optimise the
room selector's prompt template with APO (critiques and edits by an OpenAI-compatible model, GEPA's search).

    OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_API_KEY=... python room_selector_apo.py

The best prompt is printed, published as the `prompt_template` resource, and saved in apo-out/best_prompt.txt
(every candidate with its critique and scores in apo-out/history.json); the rollout view shows each round.
"""

from __future__ import annotations

from pathlib import Path

from openai import AsyncOpenAI
from room_selector import load_room_tasks, prompt_template_baseline, room_selector

import lightning_otel as agl
from lightning_otel.collector import CollectorConfig


def load_train_val_dataset() -> tuple[list, list]:
    tasks = load_room_tasks()
    half = len(tasks) // 2
    return tasks[:half], tasks[half:]


def main() -> None:
    algo = agl.APO(
        AsyncOpenAI(), val_batch_size=10, gradient_batch_size=4, beam_width=2, branch_factor=2, beam_rounds=2
    )
    trainer = agl.Trainer(
        n_workers=1,
        algorithm=algo,
        # APO starts from the baseline prompt: set it here (the resource key can be anything)
        initial_resources={"prompt_template": prompt_template_baseline()},
        # not in the tutorial: keep the store, so `lightning-otel ui apo-out/collector.sqlite3` shows every round
        collector=CollectorConfig.embedded(store_url=f"sqlite:///{Path('apo-out/collector.sqlite3').resolve()}"),
    )
    dataset_train, dataset_val = load_train_val_dataset()
    result = trainer.fit(agent=room_selector, train_dataset=dataset_train, val_dataset=dataset_val)
    print(f"best prompt ({result.best_label}, validation {result.best_val_score:.3f}, seed "
          f"{result.seed_val_score:.3f}; {result.rollouts} rollouts, saved in {result.output_dir}):")  # fmt: skip
    print(algo.get_best_prompt().template)


if __name__ == "__main__":
    main()
