"""What an untrained policy does with the calculator agent (examples/calculator, LangGraph): how often it calls the
tool, how often the call parses, how often its final number is right. The first row of the tool-calling task in the
SmolLM2 learning table, and what decides whether GRPO has anything to start from.

    python -m benchmarks.calculator_probe --model smollm2 --problems 32    # SmolLM2-135M-Instruct (about 3 min)
    python -m benchmarks.calculator_probe --quick                           # the tiny model, 2 problems (tests)

The agent runs as in training (`Trainer.dev` through the policy gateway, 2 runners) against a CPU replica of the
model, sampled at temperature 1 with replies of at most 96 tokens. The replica serves a copy of the model folder
whose chat template renders tools (lightning_otel/models/chatml_tools.jinja) and reads the replies' tool calls with
its `hermes` parser, as vLLM started with `--chat-template` and `--tool-call-parser hermes` would.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import lightning_otel as agl
from benchmarks._seeded_runs import standard_error
from benchmarks._two_choices import MODELS
from lightning_otel.agent_api.script_folder import import_from_folder
from lightning_otel.serving.cpu_replica import serve_folder
from lightning_otel.testing.tiny_model import model_or_tiny

ROOT = Path(__file__).resolve().parents[1]
calculator_agent, model_with_tools = import_from_folder(ROOT / "examples" / "calculator", "calculator_agent",
                                                        "model_with_tools")  # fmt: skip
calculator_rollout, word_problems = calculator_agent.calculator_rollout, calculator_agent.word_problems
with_tools_template = model_with_tools.with_tools_template


def probe(model: str, problems: int, seed: int, workdir: Path) -> dict:
    folder = with_tools_template(model_or_tiny(model, workdir, seed=seed), workdir)
    records = workdir / "episodes.jsonl"
    tasks = [{**task, "record_file": str(records)} for task in word_problems(problems, seed=seed)]
    with serve_folder(folder, seed=seed) as base_url:
        llm = agl.LLM(base_url, "agl-policy", sampling_parameters={"temperature": 1.0, "max_tokens": 96})
        trainer = agl.Trainer(n_runners=2, adapter={"agent_match": "agent"}, initial_resources={"main_llm": llm})
        with agl.quiet(workdir / "probe.log"):
            trainer.dev(calculator_rollout, tasks, gateway=True, print_spans=False)
    episodes = [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    return {
        "model": model, "seed": seed, "problems": problems, "episodes": len(episodes),
        "called": sum(episode["tool_calls"] > 0 for episode in episodes),
        "unparsed": sum(episode["unparsed_call"] for episode in episodes),
        "right": sum(episode["reward"] for episode in episodes),
        "replies": [episode["reply"][:160] for episode in episodes[:4]],
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS, default="smollm2")
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="the tiny model, 2 problems: that it runs (the tests)")
    args = parser.parse_args()
    if args.quick:
        args.model, args.problems = "tiny", 2
    with tempfile.TemporaryDirectory(prefix="agl-calculator-") as folder:
        found = probe(args.model, args.problems, args.seed, Path(folder))
    print(json.dumps(found))
    count = found["episodes"]
    right = found["right"] / count if count else float("nan")
    print(f"{args.model}: {count} of {args.problems} problems ran; called the calculator in {found['called']} "
          f"(a call left unparsed in {found['unparsed']}); "
          f"answered right {found['right']:.0f} ({right:.3f} +- {standard_error(right, count):.3f})")  # fmt: skip
    if count != args.problems:
        print("not a measurement: an episode left no record", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
