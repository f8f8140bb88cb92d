"""Evaluate any OpenAI-compatible model as the twenty-questions player (the same CrewAI flow training uses).

    python q20_evaluate.py --model Qwen/Qwen3-30B-A3B-Instruct-2507 --base-url http://127.0.0.1:8000/v1 \\
        --output-file logs/twenty_questions_results.jsonl --search

One JSON line per game is appended to `--output-file` (model, noun, category, won, questions asked, the questions
and answers), so runs accumulate and can be compared later; the win rate and mean turns are printed. The answerer
is OPENAI_BASE_URL/OPENAI_API_KEY with `--answerer-model`. `--scripted` plays both sides with an offline scripted
server (a check of the wiring, not of a model).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

from q20_agent import TwentyQuestionsFlow, make_llm
from q20_train import load_tasks, scripted_reply

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the player's model name, as its endpoint knows it")
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"), help="the player's endpoint")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    parser.add_argument("--answerer-model", default="gpt-4.1-mini")
    parser.add_argument("--split", default="test", choices=["train", "test"])
    parser.add_argument("--limit", type=int, help="play only the first N nouns")
    parser.add_argument("--max-turns", type=int, default=20)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--search", action="store_true", help="the mock search tool where the noun enables it")
    parser.add_argument("--scripted", action="store_true", help="offline scripted models for both sides")
    parser.add_argument("--output-file", type=Path, default=HERE / "logs" / "twenty_questions_results.jsonl")
    args = parser.parse_args(argv)
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    tasks = load_tasks(args.split, search=args.search)[: args.limit]
    with contextlib.ExitStack() as stack:
        if args.scripted:
            from lightning_otel.testing import OpenAITestServer

            server = stack.enter_context(OpenAITestServer(scripted_reply))
            player_url = answerer_url = server.base_url
        else:
            answerer_url = os.environ.get("OPENAI_BASE_URL")
            player_url = args.base_url
            if not player_url or not answerer_url:
                parser.error("set --base-url (the player) and OPENAI_BASE_URL (the answerer), or use --scripted")
        player = make_llm(args.model, player_url, args.api_key, temperature=args.temperature)
        answerer = make_llm(args.answerer_model, answerer_url, os.environ.get("OPENAI_API_KEY"), temperature=0.0)
        args.output_file.parent.mkdir(parents=True, exist_ok=True)
        results = []
        for task in tasks:
            started = time.monotonic()
            flow = TwentyQuestionsFlow(player_llm=player, answerer_llm=answerer,
                                       search_llm=answerer if task["search"] else None)  # fmt: skip
            game = flow.play(task["answer"], task["category"], max_turns=args.max_turns)
            record = {
                "model": args.model, "answer": game.answer, "category": task["category"], "won": game.guessed,
                "turns": game.turns, "search": task["search"], "questions": game.questions, "replies": game.replies,
                "seconds": round(time.monotonic() - started, 2),
            }  # fmt: skip
            results.append(record)
            with args.output_file.open("a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")
            print(f"{task['answer']:<12} {'won' if game.guessed else 'lost':<4} in {game.turns} questions")
    if not results:
        print("no games played", file=sys.stderr)
        return 1
    wins = [r for r in results if r["won"]]
    turns = statistics.fmean(r["turns"] for r in wins) if wins else float("nan")
    print(f"{args.model}: won {len(wins)}/{len(results)} ({len(wins) / len(results):.1%}), "
          f"mean questions when won {turns:.1f}; appended to {args.output_file}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
