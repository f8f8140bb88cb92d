"""Train the twenty-questions player (q20_agent.py, a CrewAI flow) with the Tinker-shaped backend, or VERL.

    python q20_train.py dryrun                                        # a few games, nothing trained, all printed
    agl-otel-collector --query-port 4747 --http-port 4748 --grpc-port -1
    python q20_train.py algo --model qwen4b --search --port 4747      # the algorithm (hosted Tinker: TINKER_API_KEY)
    python q20_train.py runner --port 4747 --n-runners 4              # runners; start more at any time

Only the player learns (`agent_match="player"`): its calls become samples, the answerer's and the search tool's
never do. The reward is 1 when the player names the secret within `--max-turns` questions, else 0.
`--model`: `qwen4b`/`qwen30b` (hosted by Tinker), a Hugging Face model folder (the local engine, on this machine),
or `tiny` (a random tiny Qwen2 built offline: mechanics only, it never wins). The answerer (and the mock search) is
any OpenAI-compatible model: OPENAI_BASE_URL/OPENAI_API_KEY and `--answerer-model`, or `--answerer scripted` (an
offline stand-in that answers "No" to everything). The dry run plays against scripted models unless `--base-url`
points at a real one.
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import sys
from pathlib import Path
from typing import Any

import lightning_otel as agl

HERE = Path(__file__).resolve().parent
NOUNS = HERE / "q20_nouns.csv"
TINKER_MODELS = {"qwen4b": "Qwen/Qwen3-4B-Instruct-2507", "qwen30b": "Qwen/Qwen3-30B-A3B-Instruct-2507"}
AGENT_MATCH = "player"


def load_tasks(split: str, *, search: bool = False) -> list[dict[str, Any]]:
    """The nouns of one split as tasks; `search`: the mock search tool where the row enables it."""
    with NOUNS.open(newline="", encoding="utf-8") as rows:
        selected = [row for row in csv.DictReader(rows) if row["split"] == split]
    return [
        {
            "task_id": row["answer"],
            "answer": row["answer"],
            "category": row["category"],
            "search": search and row["search_enabled"] == "true",
        }
        for row in selected
    ]


@agl.rollout
def q20_rollout(task: dict[str, Any], resources: dict[str, Any], rollout: agl.Rollout) -> float:
    """One game: the policy plays, the answerer (a resource) answers; reward 1 for a win."""
    from q20_agent import TwentyQuestionsFlow, make_llm

    policy, answerer = resources["main_llm"], resources["answerer_llm"]
    player_llm = make_llm(policy.model, policy.get_base_url(rollout.rollout_id, rollout.attempt_id), policy.api_key,
                          **policy.sampling_parameters)  # fmt: skip
    helper = make_llm(answerer.model, answerer.endpoint, answerer.api_key, temperature=0.0)
    flow = TwentyQuestionsFlow(
        player_llm=player_llm, answerer_llm=helper, search_llm=helper if task["search"] else None
    )
    game = flow.play(task["answer"], task["category"], max_turns=int(resources.get("q20_max_turns", 20)))
    return 1.0 if game.guessed else 0.0


def scripted_reply(body: dict[str, Any]) -> str:
    """The offline stand-in for both sides: the player asks two questions, then guesses "penguin" (right once in
    a while); the answerer says No; the search tool gets a fixed snippet."""
    text = " ".join(str(message.get("content") or "") for message in body.get("messages", []))
    if "answerer" in text:
        return "Thought: I now know the final answer\nFinal Answer: No"
    if "encyclopedia" in text:
        return "It is a common noun."
    asked = text.count("Q: ")
    question = ("Is it alive?", "Is it bigger than a person?")[asked] if asked < 2 else "Is it a penguin?"
    return f"Thought: I now know the final answer\nFinal Answer: {question}"


def answerer_resource(args: argparse.Namespace, stack: Any) -> agl.LLM:
    if args.answerer == "scripted" or (args.mode == "dryrun" and not args.base_url):
        from lightning_otel.testing import OpenAITestServer

        server = stack.enter_context(OpenAITestServer(scripted_reply))
        return agl.LLM(server.base_url, "scripted-answerer")
    base_url = os.environ.get("OPENAI_BASE_URL")
    if not base_url:
        raise SystemExit("the answerer needs OPENAI_BASE_URL (and OPENAI_API_KEY), or --answerer scripted")
    return agl.LLM(base_url, args.answerer_model, api_key=os.environ.get("OPENAI_API_KEY"))


def dryrun(args: argparse.Namespace) -> int:
    """A few games through Trainer.dev: spans, the player's samples, rewards; nothing trained."""
    import contextlib

    with contextlib.ExitStack() as stack:
        answerer = answerer_resource(args, stack)
        policy = agl.LLM(args.base_url, args.model, api_key=os.environ.get("OPENAI_API_KEY")) if args.base_url \
            else answerer  # fmt: skip
        trainer = agl.Trainer(
            n_runners=1,
            adapter={"agent_match": AGENT_MATCH},
            initial_resources={"main_llm": policy, "answerer_llm": answerer, "q20_max_turns": args.max_turns},
        )
        tasks = load_tasks("train", search=args.search)[: args.n_tasks]
        result = trainer.dev(q20_rollout, tasks, gateway=True, print_spans=args.verbose)
    samples = [triplet for batch in result.train for triplet in batch.triplets()]
    agents = sorted({triplet.agent_name or "?" for triplet in samples})
    print(f"\ndry run: {len(tasks)} games, {len(samples)} samples, from agents {agents}")
    if not samples or agents != [AGENT_MATCH]:
        print(f"expected samples from the {AGENT_MATCH!r} agent only", file=sys.stderr)
        return 1
    return 0


def algorithm(args: argparse.Namespace) -> agl.Algorithm:
    if args.algorithm == "verl":  # GRPO with verl on the same samples (a model folder; vLLM on GPU, CPU otherwise)
        return agl.VERL({
            "algorithm": {"adv_estimator": "grpo"},
            "data": {"train_batch_size": args.batch_size, "max_prompt_length": 2048, "max_response_length": 64},
            "actor_rollout_ref": {
                "model": {"path": local_model(args)},
                "rollout": {"n": args.group_size},
                "actor": {"ppo_mini_batch_size": args.batch_size, "optim": {"lr": args.learning_rate}},
            },
            "trainer": {"total_training_steps": args.steps, "total_epochs": 1000, "logger": ["console"],
                        "default_local_dir": str(args.workdir / "checkpoints")},
        })  # fmt: skip
    if args.model in TINKER_MODELS:
        engine: Any = agl.RemoteEngine(TINKER_MODELS[args.model], rank=32)
    else:
        engine = agl.LocalEngine(local_model(args), rank=32, log_dir=args.workdir)
    options = agl.TrainingOptions(
        schedule=agl.Schedule(batch_size=args.batch_size, group_size=args.group_size, max_steps=args.steps,
                              val_every=5),
        sampling=agl.Sampling(max_tokens=64),
        trackers=agl.Trackers(logger=("console", "jsonl"), log_dir=args.workdir),
    )  # fmt: skip
    return agl.Tinker(engine, options, learning_rate=args.learning_rate, loss_fn="importance_sampling")


def local_model(args: argparse.Namespace) -> str:
    if args.model != "tiny":
        return args.model
    from lightning_otel.testing import save_tiny_model

    folder = args.workdir / "tiny-model"
    if not (folder / "config.json").exists():
        save_tiny_model(folder)
    return str(folder)


def algo(args: argparse.Namespace, collector: str) -> int:
    import contextlib

    with contextlib.ExitStack() as stack:
        trainer = agl.Trainer(
            n_runners=0,  # runners are started separately (`q20_train.py runner`), in an environment with CrewAI
            collector=collector,
            algorithm=algorithm(args),
            adapter={"agent_match": AGENT_MATCH},
            initial_resources={"answerer_llm": answerer_resource(args, stack), "q20_max_turns": args.max_turns},
            settings=agl.RunSettings(no_runner_timeout_s=args.no_runner_timeout),
        )
        with agl.quiet(args.workdir / "train.log", verbose=args.verbose):  # torch and the like: into the log
            trainer.fit("q20_train:q20_rollout", load_tasks("train", search=args.search),
                        load_tasks("test", search=args.search))  # fmt: skip
    return 0


def runner(args: argparse.Namespace, collector: str) -> int:
    from lightning_otel import RunnerOptions, run_runner_processes

    options = RunnerOptions(max_concurrency=4, stop_when_training_ends=not args.keep_serving)
    return run_runner_processes(q20_rollout, collector, n_runners=args.n_runners, options=options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["dryrun", "algo", "runner"])
    parser.add_argument("--model", default="tiny", help="qwen4b, qwen30b (Tinker), a model folder, or tiny")
    parser.add_argument("--algorithm", choices=["tinker", "verl"], default="tinker")
    parser.add_argument("--search", action="store_true", help="give the player the mock search tool")
    parser.add_argument("--port", type=int, default=4747, help="the collector's query port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--n-runners", type=int, default=4)
    parser.add_argument("--keep-serving", action="store_true", help="runner: stay when the training ends")
    parser.add_argument("--max-turns", type=int, help="questions per game (default 20; 3 in the dry run)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=4e-5)
    parser.add_argument("--answerer", choices=["openai", "scripted"], default="openai")
    parser.add_argument("--answerer-model", default="gpt-4.1-mini")
    parser.add_argument("--base-url", help="dryrun: the player's OpenAI-compatible endpoint (default: scripted)")
    parser.add_argument("--n-tasks", type=int, default=4, help="dryrun: games to play")
    parser.add_argument("--no-runner-timeout", type=float, default=600.0, help="algo: seconds without any runner")
    parser.add_argument("--verbose", action="store_true",
                        help="dryrun: every span; algo: other libraries' output here, not in train.log")  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=HERE / "logs" / "q20")
    args = parser.parse_args(argv)
    if args.max_turns is None:
        args.max_turns = 3 if args.mode == "dryrun" else 20
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # CrewAI's own telemetry off: our traces only
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args.workdir.mkdir(parents=True, exist_ok=True)
    collector = f"http://{args.host}:{args.port}"
    if args.mode == "dryrun":
        return dryrun(args)
    if args.mode == "algo":
        return algo(args, collector)
    return runner(args, collector)


if __name__ == "__main__":
    sys.exit(main())
