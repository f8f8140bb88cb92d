"""What an untrained policy does with the seeds' SQL agent (examples/spider, LangGraph, one write turn as in the
example's CPU profile) on the Spider-format validation split: execution accuracy, greedy, and why it misses (no
query extracted, a query SQLite refuses, a query that runs and returns other rows). The first row of the SQL task in
the SmolLM2 learning table.

    python benchmarks/sql_agent_probe.py --model smollm2 --questions 100   # SmolLM2-135M-Instruct
    python benchmarks/sql_agent_probe.py --quick                           # the tiny model, 2 questions (tests)

The data is the example's offline Spider-format set (built on first use, as `train_sql_agent.py cpu` does); the
agent runs as in training (`Trainer.dev` through the policy gateway, 2 runners) against a CPU replica of the model,
at temperature 0 with replies of at most 160 tokens.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples" / "spider")]

from prepare_dataset import data_ready, default_data_dir, prepare  # noqa: E402
from spider_eval import evaluate_query  # noqa: E402
from sql_agent import LitSQLAgent, database_path  # noqa: E402

import lightning_otel as agl  # noqa: E402
from benchmarks._seeded_runs import standard_error  # noqa: E402
from benchmarks._two_choices import MODELS, base_model  # noqa: E402
from lightning_otel.serving.cpu_replica import serve_folder  # noqa: E402


def outcome(query: str, gold: str, db: Path) -> str:
    """right, no query, refused (SQLite raised) or other rows."""
    if not query.strip():
        return "no query"
    if evaluate_query(query, gold, db, raise_on_error=False):
        return "right"
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
            connection.execute(query).fetchmany(1)
    except sqlite3.Error:
        return "refused"
    return "other rows"


class RecordingSQLAgent(LitSQLAgent):
    """The example's agent, each final query and its outcome appended to `record_file` (one line a question)."""

    def __init__(self, record_file: Path, data_dir: Path) -> None:
        super().__init__(max_turns=1, truncate_length=256, data_dir=data_dir, check_last_turn=False)
        self.record_file = record_file

    def rollout(self, task: dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        from sql_graph import build_langgraph_sql_agent

        llm: agl.LLM = resources["main_llm"]
        db = database_path(self.data_dir, task["db_id"])
        agent = build_langgraph_sql_agent(
            database_path=f"sqlite:///{db}", max_turns=1, truncate_length=256, check_last_turn=False,
            openai_base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id), model=llm.model,
            sampling_parameters=llm.sampling_parameters, api_key=llm.api_key,
        )  # fmt: skip
        query = str(agent.invoke({"question": task["question"]}, {"recursion_limit": 20}).get("query") or "")
        result = outcome(query, task["query"], db)
        with open(self.record_file, "a") as out:
            out.write(json.dumps({"question": task["question"], "query": query[:300], "outcome": result}) + "\n")
        return float(result == "right")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS, default="smollm2")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="the tiny model, 2 questions: that it runs (the tests)")
    args = parser.parse_args()
    if args.quick:
        args.model, args.questions = "tiny", 2
    data_dir = default_data_dir()
    if not data_ready(data_dir):
        prepare(data_dir)
    tasks = agl.load_tasks(data_dir / "test_dev_500.parquet")[: args.questions]
    with tempfile.TemporaryDirectory(prefix="agl-sql-probe-") as folder:
        work = Path(folder)
        records = work / "queries.jsonl"
        with serve_folder(base_model(args.model, args.seed, work), seed=args.seed) as base_url:
            llm = agl.LLM(base_url, "agl-policy", sampling_parameters={"temperature": 0.0, "max_tokens": 160})
            trainer = agl.Trainer(n_runners=2, adapter={"agent_match": "write"}, initial_resources={"main_llm": llm})
            with agl.quiet(work / "probe.log"):
                trainer.dev(RecordingSQLAgent(records, data_dir), val_dataset=tasks, print_spans=False)
        found = [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    counts = Counter(record["outcome"] for record in found)
    right = counts["right"] / len(found) if found else float("nan")
    print(json.dumps({"model": args.model, "questions": args.questions, "outcomes": counts,
                      "examples": [record["query"][:160] for record in found[:4]]}))  # fmt: skip
    print(f"{args.model}: {len(found)} of {args.questions} questions ran; execution accuracy {right:.3f} +- "
          f"{standard_error(right, len(found)):.3f} (greedy); outcomes {dict(counts)}")  # fmt: skip
    if len(found) != args.questions:
        print("not a measurement: a question left no record", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
