"""Dry run of the ADK agent without VERL: `Trainer.dev` runs a few tasks and prints every rollout's spans, the
samples `agent_match` selects (with their token ids) and the rewards.

    python adk_debug.py --file data/test.parquet                  # against $OPENAI_API_BASE ($OPENAI_MODEL)
    python adk_debug.py --file data/test.parquet --test-server    # the built-in scripted model, offline

The endpoint must return token ids (vLLM does; `lightning-otel test-server` does) for the samples to carry them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before LiteLLM is imported: no cost-map download

from adk_agent import LitAdkAgent
from prepare_dataset import data_ready, prepare

import lightning_otel as agl

HERE = Path(__file__).resolve().parent


@contextlib.contextmanager
def endpoint(test_server: bool, tasks: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    """(base URL, model): the scripted test server's, or $OPENAI_API_BASE's."""
    if not test_server:
        if "OPENAI_API_BASE" not in os.environ:
            sys.exit("adk_debug: set OPENAI_API_BASE (and OPENAI_MODEL), or pass --test-server for the scripted model")
        yield os.environ["OPENAI_API_BASE"], os.environ.get("OPENAI_MODEL", "gpt-4.1-nano")
        return
    from scripted_teacher import scripted_teacher

    from lightning_otel.testing import OpenAITestServer

    with OpenAITestServer(replies=scripted_teacher(tasks)) as server:
        yield server.base_url, "scripted-teacher"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=HERE / "data" / "test.parquet", help="tasks (parquet or JSONL)")
    parser.add_argument("--n-tasks", type=int, default=4)
    parser.add_argument("--test-server", action="store_true", help="the built-in scripted model instead of a real one")
    parser.add_argument("--agent-match", default="LitAdkAgent")
    parser.add_argument("--quiet", action="store_true", help="no span trees, only the samples and the summary")
    args = parser.parse_args(argv)
    args.file = args.file.resolve()
    if args.file.parent == HERE / "data" and not data_ready(args.file.parent):
        prepare(args.file.parent)  # the default data, built on first use
    try:
        tasks = agl.load_tasks(args.file)[: args.n_tasks]
    except (OSError, ValueError) as exc:
        sys.exit(f"adk_debug: {exc} (prepare_dataset.py makes the data; see its --help)")
    with endpoint(args.test_server, tasks) as (base_url, model):
        llm = agl.LLM(base_url, model, api_key=os.environ.get("OPENAI_API_KEY", "dummy"),
                      sampling_parameters={"temperature": 0.0})  # fmt: skip
        trainer = agl.Trainer(
            n_runners=1, initial_resources={"main_llm": llm}, adapter={"agent_match": args.agent_match}
        )
        result = trainer.dev(LitAdkAgent(data=args.file.parent), dev_dataset=tasks, print_spans=not args.quiet)
    rewards = [reward for batch in result.train for reward in batch.rewards().values() if reward is not None]
    samples = sum(len(batch.triplets()) for batch in result.train)
    print(f"dry run: {len(rewards)} rollouts, {samples} samples, execution accuracy "
          f"{statistics.fmean(rewards) if rewards else 0:.2f}")  # fmt: skip
    return 0 if samples else 1


if __name__ == "__main__":
    sys.exit(main())
