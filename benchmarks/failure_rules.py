"""Fault injection: what a training keeps and wastes when calls fail, under our rule against dropping whole groups.

    python -m benchmarks.failure_rules [--tasks 8] [--group 8] [--rate 0.05] [--seeds 0 1 2] [--quick]

Each run is one `Trainer.fit` step (Baseline) of `--tasks` tasks x `--group` rollouts against the OpenAI-compatible
test server, which answers 503 to a `--rate` share of the calls (seeded), with four agents in turn:
- `raising`: four calls, the client's error raised (the `four_calls` agent, no client retries);
- `swallowing`: two calls, a failed one swallowed and the reward the share that came back (a careless agent);
- `looping`: one task in four repeats the same call (the same answer each time) up to 100 times;
- `tool`: one call, then a tool over HTTP whose server (a second one) answers 503 to a `--rate` share of its calls
  (the policy's server then fails none: the tool's failures alone).

Our rule: an infrastructure failure (raised, or swallowed and seen in the spans) fails the attempt and is retried on a
fresh one, up to `max_attempts` (3); past that the rollout is dropped and its group's advantages use the rest; a
rollout a limit stops (`RolloutLimits(max_repeats=4)`) is a policy failure, trained with reward 0. The alternative,
dropping every group with a failure and retrying nothing, is measured on the same run's first attempts: a group
whose first attempts include an infrastructure failure is dropped whole. Printed per run: rollouts trained, attempts
wasted (attempts that trained nothing), wall time, and how many trained rollouts hold a failed call (must be 0).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import threading
import time
from typing import Any

import lightning_otel
from lightning_otel.testing import runtime_agents

AGENTS = {
    "raising": runtime_agents.four_calls,
    "swallowing": runtime_agents.swallowing_agent,
    "looping": runtime_agents.failing_agent,
    "tool": runtime_agents.tool_agent,
}


def seeded_faults(rate: float, seed: int) -> Any:
    rng, lock = random.Random(seed), threading.Lock()

    def fail(body: dict[str, Any]) -> int | None:
        with lock:
            return 503 if rng.random() < rate else None

    return fail


@contextlib.contextmanager
def tool_server(fail: Any) -> Any:
    """A tool's HTTP server on loopback: 200, or what `fail` says (503)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Tool(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server calls it by this name
            status = fail({}) or 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Tool)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/lookup"
    finally:
        server.shutdown()
        server.server_close()


def one_run(agent: str, tasks: int, group: int, rate: float, seed: int) -> dict[str, float]:
    from lightning_otel.collector.server import CollectorConfig
    from lightning_otel.testing import OpenAITestServer

    tools = contextlib.ExitStack()
    tool_url = tools.enter_context(tool_server(seeded_faults(rate, seed))) if agent == "tool" else None
    dataset = [{"question": f"t{index}", **({"then": "loop"} if agent == "looping" and index % 4 == 0 else {}),
                **({"tool_url": tool_url} if tool_url else {})} for index in range(tasks)]  # fmt: skip
    policy_faults = None if agent == "tool" else seeded_faults(rate, seed)
    with tools, OpenAITestServer(fail=policy_faults) as server:
        trainer = lightning_otel.Trainer(
            n_runners=1,
            progress=False,
            algorithm=lightning_otel.Baseline(batch_size=tasks, n_rollouts=group),
            initial_resources={"main_llm": lightning_otel.LLM(server.base_url, "agl-tiny")},
            collector=CollectorConfig.embedded(),
            settings=lightning_otel.RunSettings(max_attempts=3),
            runner_options=lightning_otel.RunnerOptions(limits=lightning_otel.RolloutLimits(max_repeats=4)),
        )  # fmt: skip
        began = time.monotonic()
        batch = trainer.fit(AGENTS[agent], dataset).train[0]
        wall = time.monotonic() - began
    trained = {rollout_id for rollout_id, adapted in batch.adapted.items() if adapted.triplets}
    attempts = sum(record["attempts"] for record in batch.rollouts)
    # a trained rollout must hold no failed call: its spans say whether one did
    poisoned = sum(
        1 for rollout_id in trained
        if any((span.get("status") or {}).get("code") == 2 and span["attributes"].get("gen_ai.operation.name") == "chat"
               for span in batch.spans[rollout_id])
    )  # fmt: skip
    # the alternative, on this run's first attempts: a group with an infrastructure failure among them is dropped
    # (a retried rollout's first attempt failed: here every failure that is retried is the infrastructure's)
    first_failed_groups = {
        record["group_id"] for record in batch.rollouts if record["attempts"] > 1 or record["status"] != "succeeded"
    }
    groups = {record["group_id"] for record in batch.rollouts}
    kept_by_alternative = sum(1 for record in batch.rollouts if record["group_id"] not in first_failed_groups
                              and record["rollout_id"] in trained)  # fmt: skip
    return {
        "rollouts": len(batch.rollouts),
        "trained": len(trained),
        "wasted_attempts": attempts - len(trained),
        "policy_failures": batch.metrics()["policy_failures"],
        "failed_infrastructure": batch.metrics()["failed_infrastructure"],
        "poisoned": poisoned,
        "wall_s": wall,
        "alt_trained": kept_by_alternative,
        "alt_wasted": len(batch.rollouts) - kept_by_alternative,
        "alt_groups_dropped": len(first_failed_groups),
        "groups": len(groups),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--rate", type=float, default=0.05)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="2 tasks x 4, one seed, a 20%% failure rate")
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.group, args.rate, args.seeds = 4, 4, 0.2, [0]
    print(f"{args.tasks} tasks x {args.group} rollouts, {args.rate:.0%} of calls answered 503, seeds {args.seeds}")
    bad = 0
    for agent in AGENTS:
        runs = [one_run(agent, args.tasks, args.group, args.rate, seed) for seed in args.seeds]
        for seed, run in zip(args.seeds, runs, strict=True):
            print(
                f"{agent:10s} seed {seed}: ours trained {run['trained']}/{run['rollouts']}, wasted attempts "
                f"{run['wasted_attempts']}, infra failed {run['failed_infrastructure']}, policy failed "
                f"{run['policy_failures']}, {run['wall_s']:.1f} s | drop whole groups: trained {run['alt_trained']}, "
                f"wasted {run['alt_wasted']} ({run['alt_groups_dropped']} of {run['groups']} groups) | trained with a "
                f"failed call: {run['poisoned']}"
            )  # fmt: skip
            bad += run["poisoned"]
        mean = {key: statistics.fmean(run[key] for run in runs) for key in ("trained", "wasted_attempts", "alt_trained",
                                                                           "alt_wasted")}  # fmt: skip
        print(f"{agent:10s} mean: ours trained {mean['trained']:.1f}, wasted {mean['wasted_attempts']:.1f} | drop "
              f"whole groups: trained {mean['alt_trained']:.1f}, wasted {mean['alt_wasted']:.1f}")  # fmt: skip
    if bad:
        print(f"FAILED: {bad} trained rollouts hold a failed call", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
