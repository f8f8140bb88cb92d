"""What an untrained policy does with the seeds' SQL agent (examples/spider, LangGraph, one write turn as in the
example's CPU profile) on the Spider-format validation split: execution accuracy, greedy, and why it misses (no
query extracted, a query SQLite refuses, a query that runs and returns other rows). The first row of the SQL task in
the SmolLM2 learning table.

    python -m benchmarks.sql_agent_probe --model smollm2 --questions 100   # SmolLM2-135M-Instruct
    python -m benchmarks.sql_agent_probe --folder runs/sql/seed-0/model-warm --questions 48 --turns 3
    python -m benchmarks.sql_agent_probe --quick                           # the tiny model, 2 questions (tests)

The data is the example's offline Spider-format set (built on first use, as `train_sql_agent.py cpu` does); the
agent runs as in training (`Trainer.dev` through the policy gateway, 2 runners) against a CPU replica of the model,
at temperature 0 with replies of at most 160 tokens. `--folder`: a model folder instead (a warm start); `--turns 3`:
the tutorial's write, execute, check, rewrite loop instead of one write (the last query is scored).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import lightning_otel as agl
from benchmarks._seeded_runs import standard_error
from benchmarks._two_choices import MODELS
from lightning_otel.agent_api.script_folder import import_from_folder
from lightning_otel.serving.cpu_replica import serve_folder
from lightning_otel.testing.tiny_model import model_or_tiny

ROOT = Path(__file__).resolve().parents[1]
prepare_dataset, recorded_sql_agent = import_from_folder(ROOT / "examples" / "spider", "prepare_dataset",
                                                          "recorded_sql_agent")  # fmt: skip
data_ready, default_data_dir, prepare = (
    prepare_dataset.data_ready,
    prepare_dataset.default_data_dir,
    prepare_dataset.prepare,
)
RecordingSQLAgent = recorded_sql_agent.RecordingSQLAgent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS, default="smollm2")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folder", type=Path, help="a model folder (a warm start) instead of --model")
    parser.add_argument("--max-tokens", type=int, default=160, help="a reply's length (the SmolLM2 example's: 64)")
    parser.add_argument("--turns", type=int, default=1, choices=(1, 2, 3), help="write turns (3: check and rewrite)")
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
        model = args.folder or model_or_tiny(args.model, work, seed=args.seed)
        with serve_folder(model, seed=args.seed) as base_url:
            sampling = {"temperature": 0.0, "max_tokens": args.max_tokens}
            llm = agl.LLM(base_url, "agl-policy", sampling_parameters=sampling)
            trainer = agl.Trainer(n_runners=2, adapter={"agent_match": "write"}, initial_resources={"main_llm": llm})
            with agl.quiet(work / "probe.log"):
                trainer.dev(RecordingSQLAgent(data_dir, records, turns=args.turns), val_dataset=tasks,
                            print_spans=False)  # fmt: skip
        found = [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    counts = Counter(record["outcome"] for record in found)
    right = counts["right"] / len(found) if found else float("nan")
    name = str(args.folder or args.model)
    print(json.dumps({"model": name, "turns": args.turns, "questions": args.questions, "outcomes": counts,
                      "examples": [record["query"][:160] for record in found[:4]]}))  # fmt: skip
    print(f"{name}, {args.turns} turn(s): {len(found)} of {args.questions} questions ran; execution accuracy "
          f"{right:.3f} +- {standard_error(right, len(found)):.3f} (greedy); outcomes {dict(counts)}")  # fmt: skip
    if len(found) != args.questions:
        print("not a measurement: a question left no record", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
