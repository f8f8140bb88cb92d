"""Scale-out: rollouts/s with 1, 2 and 4 runners as Ray actors (and as local processes beside them) against the agent
alone; spans/s acknowledged after commit with 1 and 2 collectors on one PostgreSQL.

    python -m benchmarks.scale_out [--rollouts 1000] [--runners 1,2,4] [--seconds 10] [--quick]

(a) `Trainer.fit` with a Baseline over `--rollouts` tasks of the `four_calls` agent (four sequential chat calls by two
    named agents) against the zero-latency OpenAI-compatible test server in its own process (trainer_throughput.py's
    setup): runners as Ray actors (`RayRunners(n)`, one Ray started here with as many logical CPUs as actors) and
    as local runner processes (`n_runners=n`), each running up to `--concurrency` rollouts at once. Baseline beside
    them: the same agent function in one uninstrumented process, no trainer, concurrency `--concurrency` x n. Rates
    are over the batch (enqueue to read), not counting runner start; a run that lost a rollout or a call is no figure.
(b) 4 sender processes looping 512-span OTLP/HTTP batches (collector_ingest.py's senders) at one collector, then
    split over two collectors on the same throwaway PostgreSQL (fsync on): spans/s acknowledged after commit.
On a machine with few cores the runners, the collector, the test server and the database share them: the ratios
and the cost per rollout are what carry over, not the absolute rates.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import lightning_otel
from benchmarks.capture_overhead import start_server
from benchmarks.collector_ingest import collectors_rate
from benchmarks.trainer_throughput import uninstrumented
from lightning_otel.collector import EmbeddedCollector
from lightning_otel.testing.runtime_agents import four_calls

REPO = str(Path(__file__).resolve().parents[1])


def trainer_rate(base_url: str, rollouts: int, concurrency: int, runners: lightning_otel.RayRunners | int) -> float:
    """Rollouts/s over one batch of `rollouts` through Trainer.fit; exits when the batch lost anything."""
    with (
        tempfile.TemporaryDirectory(prefix="agl-bench-") as folder,
        EmbeddedCollector.on_sqlite_file(Path(folder) / "collector.sqlite3") as addresses,
    ):
        placement = {"runners": runners} if isinstance(runners, lightning_otel.RayRunners) else {"n_runners": runners}
        trainer = lightning_otel.Trainer(
            **placement,
            algorithm=lightning_otel.Baseline(batch_size=rollouts),
            adapter={"agent_match": "write"},
            initial_resources={"main_llm": lightning_otel.LLM(base_url, "agl-tiny")},
            collector=addresses.query,
            progress=False,
            runner_options=lightning_otel.RunnerOptions(max_concurrency=concurrency),
        )
        result = trainer.fit(four_calls, [{"question": f"question {i}"} for i in range(rollouts)])
    (batch,) = result.train
    metrics = batch.metrics() | {"batch_wall_s": batch.wall_s}
    if metrics["succeeded"] != rollouts or metrics["triplets"] != 2 * rollouts:
        sys.exit(f"{runners}: {metrics['succeeded']} of {rollouts} rollouts succeeded, {metrics['triplets']} triplets "
                 f"(expected {2 * rollouts}): not a measurement")  # fmt: skip
    return rollouts / metrics["batch_wall_s"]


def runner_scaling(rollouts: int, concurrency: int, counts: list[int], *, start_ray: bool) -> None:
    import ray

    server, base_url = start_server()
    try:
        print(f"(a) {rollouts} rollouts of 4 LLM calls, zero-latency test server, {os.cpu_count()} cores, "
              f"{concurrency} rollouts at once per runner")  # fmt: skip
        if start_ray:  # logical CPUs for every actor: the machine's cores are what they share
            ray.init(address="local", num_cpus=max(counts), include_dashboard=False,
                     runtime_env={"env_vars": {"PYTHONPATH": REPO}}, log_to_driver=False)  # fmt: skip
        for n in counts:
            floor = rollouts / uninstrumented(base_url, rollouts, concurrency * n)
            started = time.perf_counter()
            env = None if start_ray else {"env_vars": {"PYTHONPATH": REPO}}
            on_ray = trainer_rate(base_url, rollouts, concurrency, lightning_otel.RayRunners(n=n, runtime_env=env))
            ray_wall = time.perf_counter() - started
            local = trainer_rate(base_url, rollouts, concurrency, n)
            note = "" if start_ray else f" (the Trainer started Ray and the actors in the batch: {ray_wall:.0f} s)"
            print(
                f"  n={n}: agent alone {floor:7.1f}/s   Ray actors {on_ray:7.1f}/s ({on_ray / floor:.2f}x, "
                f"+{1000 / on_ray - 1000 / floor:.1f} ms a rollout)   local processes {local:7.1f}/s "
                f"({local / floor:.2f}x)   actors / processes {on_ray / local:.2f}x{note}"
            )
    finally:
        if ray.is_initialized():
            ray.shutdown()
        server.terminate()
        server.wait(10)


def collector_scaling(seconds: float) -> None:
    from lightning_otel.testing.pg_cluster import ThrowawayPostgres

    cluster = ThrowawayPostgres(fsync=True).start()
    try:
        store = cluster.create_database("scale_out")
        rates = []
        for n in (1, 2):
            rate, statuses = collectors_rate(store, n, seconds)
            rates.append(rate)
            print(f"  {n} collector(s) on one PostgreSQL (ack after commit): {rate:9,.0f} spans/s   "
                  f"statuses {statuses}")  # fmt: skip
        print(f"  ratio two collectors / one: {rates[1] / rates[0]:.2f}x")
    finally:
        cluster.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--runners", default="1,2,4", help="runner counts, comma-separated")
    parser.add_argument("--concurrency", type=int, default=8, help="rollouts at once per runner")
    parser.add_argument("--seconds", type=float, default=10.0, help="per collector load")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds: that it runs (the tests run it)")
    args = parser.parse_args()
    counts = [int(n) for n in args.runners.split(",")]
    if args.quick:  # and Ray started by the Trainer itself, as for a user without a cluster
        args.rollouts, counts, args.seconds = 20, [1], 1.0
    runner_scaling(args.rollouts, args.concurrency, counts, start_ray=not args.quick)
    print("\n(b) 4 OTLP/HTTP senders, 512-span batches")
    collector_scaling(args.seconds)


if __name__ == "__main__":
    main()
