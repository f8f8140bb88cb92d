"""The CPU profile's policy and warm start: a tiny model built offline, fine-tuned on a teacher's traces.

1. `build_policy`: a byte-level BPE trained on the training prompts (schemas, questions, SQL: a few tokens per word,
   so the real prompts stay ~300 tokens) and a small random Qwen2 sized to it.
2. `teacher_warm_start`: the SQL agent runs against the teacher (the scripted test server of `teacher.py`, or any
   OpenAI-compatible endpoint), its spans go to the collector, and `lightning_otel.SFT` fine-tunes the tiny model on
   write_query's calls in the rollouts that scored 1. Nothing here is specific to this agent but the teacher.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sql_agent import LitSQLAgent, database_path
from sql_graph import CHECK_QUERY_PROMPT, WRITE_QUERY_PROMPT, table_info
from teacher import scripted_teacher

import lightning_otel as agl


def tokenizer_corpus(tasks: Sequence[dict[str, Any]], data_dir: Path) -> list[str]:
    """The text the policy will read and write: the agent's prompts over the training databases, and gold SQL."""
    schemas = {db_id: table_info(database_path(data_dir, db_id)) for db_id in {task["db_id"] for task in tasks}}
    lines = []
    for task in tasks:
        values = {"dialect": "sqlite", "table_info": schemas[task["db_id"]], "input": task["question"]}
        for message in WRITE_QUERY_PROMPT.invoke(values).to_messages():
            lines.append(str(message.content))
        lines.append(f"```sqlite\n{task['query']}\n```")
    check = CHECK_QUERY_PROMPT.invoke({**values, "query": "SELECT 1", "execution": "[(1,)]"}).to_messages()
    lines.extend(str(message.content) for message in check)
    lines.extend(["THE QUERY IS CORRECT.", "THE QUERY IS INCORRECT."])
    return lines


def build_policy(
    directory: Path, tasks: Sequence[dict[str, Any]], data_dir: Path, *, hidden_size: int, layers: int, seed: int
) -> Path:
    """A tiny random Qwen2 with a tokenizer trained on the task's own text, saved as an HF model directory."""
    from lightning_otel.testing import save_tiny_model, train_tokenizer

    tokenizer = train_tokenizer(tokenizer_corpus(tasks, data_dir), vocab_size=2048, space_after_words=True)
    # Llama, not Qwen2: transformers would load a qwen2 directory's tokenizer with Qwen2's pre-tokenizer, not ours.
    return save_tiny_model(
        directory, seed=seed, hidden_size=hidden_size, layers=layers, tokenizer=tokenizer, architecture="llama"
    )


@contextlib.contextmanager
def teacher_endpoint(url: str | None, tasks: Sequence[dict[str, Any]]) -> Iterator[str]:
    """The teacher's base URL: the one given, or the scripted test server started for the run."""
    if url:
        yield url
        return
    from lightning_otel.testing import OpenAITestServer

    with OpenAITestServer(replies=scripted_teacher(tasks)) as server:
        yield server.base_url


def teacher_warm_start(
    agent: LitSQLAgent,
    tasks: Sequence[dict[str, Any]],
    model: Path,
    output: Path,
    *,
    teacher_url: str | None,
    teacher_model: str,
    collector: str | None,
    n_runners: int,
    fine_tune: dict[str, Any],
) -> agl.TrainingResult:
    """Run the agent on `tasks` against the teacher, fine-tune `model` on its rewarded calls, save to `output`."""

    counts = {"rollouts": 0, "kept": 0, "examples": 0}

    def progress(step: int, metrics: dict[str, float]) -> None:
        counts["rollouts"] += int(metrics["rollout/rollouts"])
        counts["kept"] += int(metrics.get("training/rollouts_kept", 0))
        counts["examples"] += int(metrics.get("sft/examples", 0))
        print(f"  teacher rollouts {counts['rollouts']}/{len(tasks)}: {counts['kept']} scored 1, "
              f"{counts['examples']} examples", flush=True)  # fmt: skip

    def log_loss(logs: dict[str, float]) -> None:
        if int(logs["step"]) % 100 == 0:
            print(f"  sft step {logs['step']:.0f}: loss {logs['loss']:.3f}", flush=True)

    with teacher_endpoint(teacher_url, tasks) as base_url:
        trainer = agl.Trainer(
            n_runners=n_runners,
            algorithm=agl.SFT(
                model,
                output,
                agl.TrainingOptions(schedule=agl.Schedule(batch_size=256, group_size=1), on_step=progress),
                min_reward=1.0,
                on_log=log_loss,
                **fine_tune,
            ),
            adapter={"agent_match": "write"},  # write_query's (and rewrite_query's) calls become examples
            initial_resources={"main_llm": agl.LLM(base_url, teacher_model, sampling_parameters={"temperature": 0.0})},
            collector=collector,
            progress=False,
        )
        return trainer.fit(agent, list(tasks))
