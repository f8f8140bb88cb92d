"""Train the ADK SQL agent with VERL (GRPO): the tutorial's command line.

    python train_adk.py --train-file data/train.parquet --val-file data/test.parquet \\
        --model ${OPENAI_MODEL:-meta-llama/Meta-Llama-3-8B-Instruct} --endpoint ${OPENAI_API_BASE:-http://localhost:8000/v1}
    python train_adk.py --ci-fast        # 2 GRPO steps on 4 tasks, 1 runner (on CPU: a tiny model built offline)
    python train_adk.py --ci             # 8 steps on a slice, 2 runners

`--external-store-address` is a running agl-otel-collector's query URL (default: an embedded one, SQLite under
--workdir). `--agent-match` is the adapter's regex (default "LitAdkAgent": every LLM call of the ADK agent's
rollouts, writer and checker). Data is built offline on first use when the default files are missing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before LiteLLM is imported: no cost-map download

from adk_agent import WRITER_INSTRUCTION, LitAdkAgent, database_path
from prepare_dataset import data_ready, prepare
from sql_tools import table_info

import lightning_otel as agl

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"


def gpu_config(model: str) -> dict[str, Any]:
    """The tutorial's VERL settings."""
    return {
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": 32, "max_prompt_length": 4096, "max_response_length": 2048},
        "actor_rollout_ref": {
            "rollout": {"name": "vllm", "n": 4, "multi_turn": {"format": "hermes"}},
            "actor": {"ppo_mini_batch_size": 32, "optim": {"lr": 1e-6}},
            "model": {"path": model},
        },
        "trainer": {"n_gpus_per_node": 1, "val_before_train": True, "test_freq": 32, "save_freq": 64},
    }


def cpu_config(model: Path, tasks_per_step: int) -> dict[str, Any]:
    """GRPO on CPU for a tiny model: small batches, short replies (the prompts carry the schema and ADK's history)."""
    return {
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": tasks_per_step, "max_prompt_length": 4096, "max_response_length": 32},
        "actor_rollout_ref": {
            "model": {"path": str(model)},
            "rollout": {"n": 2, "temperature": 1.0, "log_prob_micro_batch_size_per_gpu": 8},
            "actor": {"ppo_mini_batch_size": tasks_per_step, "ppo_micro_batch_size_per_gpu": 8, "optim": {"lr": 1e-4}},
        },
        "trainer": {"val_before_train": False, "test_freq": -1, "save_freq": -1, "logger": ["console"]},
    }


def tiny_policy(directory: Path, tasks: list[dict[str, Any]], data: Path) -> Path:
    """A tiny random Llama-shaped model with a BPE trained on the agent's own prompts (short prompts on CPU)."""
    from lightning_otel.testing import save_tiny_model, train_tokenizer

    schemas = {db_id: table_info(database_path(data, db_id)) for db_id in {task["db_id"] for task in tasks}}
    lines = [WRITER_INSTRUCTION.format(schema=schema) for schema in schemas.values()]
    lines += [text for task in tasks for text in (task["question"], f"```sql\n{task['query']}\n```")]
    tokenizer = train_tokenizer(lines, vocab_size=2048, space_after_words=True)
    return save_tiny_model(directory, hidden_size=64, layers=2, tokenizer=tokenizer, architecture="llama")


@contextlib.contextmanager
def store(address: str | None, workdir: Path) -> Iterator[str]:
    """The collector: the one given, or an embedded one with its SQLite file in the work directory."""
    if address:
        yield address
        return
    from lightning_otel.collector import EmbeddedCollector

    with EmbeddedCollector.on_sqlite_file(workdir / "collector.sqlite3", fresh=True) as addresses:
        yield addresses.query


def on_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-file", type=Path, default=HERE / "data" / "train.parquet", help="parquet or JSONL")
    parser.add_argument("--val-file", type=Path, default=HERE / "data" / "test.parquet", help="parquet or JSONL")
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL", DEFAULT_MODEL),
                        help="a Hugging Face id or a local directory; 'tiny' builds one offline")  # fmt: skip
    parser.add_argument("--endpoint", default=os.environ.get("OPENAI_API_BASE", "http://localhost:8000/v1"),
                        help="main_llm's starting endpoint (training serves the policy itself)")  # fmt: skip
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument("--ci", action="store_true", help="8 steps on a slice of the data, 2 runners")
    speed.add_argument("--ci-fast", action="store_true", help="2 steps on 4 tasks, 1 runner, no validation")
    parser.add_argument("--wandb-project", help="log to Weights & Biases (pip install wandb)")
    parser.add_argument("--wandb-run-name")
    parser.add_argument("--external-store-address", help="a running agl-otel-collector's query URL")
    parser.add_argument("--agent-match", default="LitAdkAgent", help="which agents' calls are trained (a regex)")
    parser.add_argument("--reward", choices=["exact", "partial"], default=None,
                        help="exact: execution match (the tutorial's); partial: with credit for a query close to the "
                             "gold one (default on CPU, where a tiny policy never matches exactly)")  # fmt: skip
    parser.add_argument("--n-runners", type=int, default=10)
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--workdir", type=Path, default=HERE / "runs", help="summary.json, the tiny model, the store")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="other libraries' output here (default: train.log in --workdir)")  # fmt: skip
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.train_file, args.val_file = args.train_file.resolve(), args.val_file.resolve()
    default_data = HERE / "data"
    if default_data in (args.train_file.parent, args.val_file.parent) and not data_ready(default_data):
        prepare(default_data)  # the default data, built on first use
    try:
        train_data, val_data = agl.load_tasks(args.train_file), agl.load_tasks(args.val_file)
    except (OSError, ValueError) as exc:
        sys.exit(f"train_adk: {exc} (prepare_dataset.py makes the data; see its --help)")
    data = args.train_file.parent
    device = on_device(args.device)
    n_runners, steps = args.n_runners, None
    if args.ci_fast:
        train_data, val_data, n_runners, steps = train_data[:4], [], 1, 2
    elif args.ci:
        train_data, val_data, n_runners, steps = train_data[:64], val_data[:16], 2, 8
    args.workdir.mkdir(parents=True, exist_ok=True)
    if device == "cpu":
        model = args.model
        if not Path(model).is_dir():
            if model != "tiny" and not (args.ci or args.ci_fast):
                sys.exit(f"train_adk: on CPU --model must be a local model directory or 'tiny', not {model!r}")
            model = tiny_policy(args.workdir / "model-tiny", train_data, data)
            print(f"policy: a tiny random model built offline ({model})")
        config = cpu_config(Path(model), tasks_per_step=2 if args.ci_fast else 4)
        config["trainer"]["total_training_steps"] = steps or 20
        if val_data:
            config["trainer"].update(val_before_train=True, test_freq=4)
    else:
        config = gpu_config(args.model)
        if steps:
            config["trainer"]["total_training_steps"] = steps
    if args.wandb_project:
        if importlib.util.find_spec("wandb") is None:
            sys.exit("train_adk: --wandb-project needs wandb (pip install wandb)")
        config["trainer"].update(logger=["console", "wandb"], project_name=args.wandb_project,
                                 experiment_name=args.wandb_run_name or "adk")  # fmt: skip
    config["trainer"].setdefault("default_local_dir", str(args.workdir / "checkpoints"))
    config["trainer"].setdefault("total_epochs", 1000)  # bounded by total_training_steps where it is set
    partial = (args.reward or ("partial" if device == "cpu" else "exact")) == "partial"
    print(f"GRPO with VERL on {device}: {len(train_data)} training tasks, {len(val_data)} validation tasks, "
          f"{n_runners} runner(s), agent_match={args.agent_match!r}, reward "
          f"{'execution match with partial credit' if partial else 'execution match'}", flush=True)  # fmt: skip
    with store(args.external_store_address, args.workdir) as collector:
        trainer = agl.Trainer(
            n_runners=n_runners,
            algorithm=agl.VERL(config, device=device),
            adapter={"agent_match": args.agent_match},
            initial_resources={
                "main_llm": agl.LLM(
                    endpoint=args.endpoint,
                    model=args.model,
                    api_key=os.environ.get("OPENAI_API_KEY", "dummy"),
                    sampling_parameters={"temperature": 0.0},
                )
            },
            collector=collector,
            progress=False,
        )
        agent = LitAdkAgent(data=data, partial=partial)
        if not args.verbose:
            print(f"other libraries' output (Ray, verl, ADK, the runners): {args.workdir / 'train.log'}", flush=True)
        with agl.quiet(args.workdir / "train.log", verbose=args.verbose):
            result = trainer.fit(agent, train_dataset=train_data, val_dataset=val_data or None)
    steps_done = [{"step": r.step, "metrics": r.metrics, "sample_agents": r.sample_agents} for r in result.steps]
    (args.workdir / "summary.json").write_text(json.dumps({"steps": steps_done}, indent=1, default=str))
    print(f"done: {len(steps_done)} GRPO steps; metrics in {args.workdir / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
