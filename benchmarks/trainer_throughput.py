"""Trainer runtime throughput: rollouts/s end to end, and adapter throughput on stored rollouts.

    python -m benchmarks.trainer_throughput [--rollouts 2000] [--adapter-rollouts 10000]
                                            [--agl-python /tmp/al03/bin/python] [--repeats N] [--target-only]

(a) End to end: `Trainer.fit` with a Baseline over `--rollouts` tasks; each rollout is the `four_calls` agent (four
    sequential chat calls by two named agents, async OpenAI client) against the OpenAI-compatible test server in its
    own process with zero latency. Everything real: embedded collector (SQLite), queue, runner processes, OTLP export,
    per-rollout flush before completion, spans read back and adapted. Measured with n_runners 1 and 2. Baseline
    beside it: the same agent function run in one uninstrumented process with the same concurrency and no trainer
    (the cost of the LLM calls alone), so the ratio is what the training machinery adds. It runs before the first
    fit and again after each; a fit's ratio is to the mean of the runs just before and after it (the machine's speed
    drifts within a run).
    Beside each rate: CPU a rollout in units of the test server's CPU a rollout (it does the same work in every
    run, so this yardstick holds when the machine's speed moves the rates between runs): the agent alone, and under
    `Trainer.fit` the runner processes (their start-up included) and the trainer with its embedded collector.
    Then how the batch's time splits: the first claim after the batch was queued (the runner processes starting:
    Python, this module again as a runner imports a training script (at module level, only what a training script
    has: lightning_otel and the agent's module, with openai), our runner's setup), the steady pace between 20% and
    80% of the completions (with its ratio to the agent alone), and the drain after the last claim.
    `--repeats N` runs the configurations N times, interleaved, and ends with each one's ratios, their mean, spread
    and median: one fit's ratio moves by about 0.1 between runs on a 2-core VM. `--target-only` runs only the
    configuration the throughput target is set on (2 runners, the default span_wait_s; docs/performance.md).
(b) Adapter: `TraceToTriplet` over `--adapter-rollouts` rollouts of flat spans as the collector returns them
    (4 LLM spans with 200 prompt + 100 response token ids, 4 agent spans, a reward span each), spans/s; beside it,
    Agent Lightning 0.3's `TracerTraceToTriplet` on the same rollouts when `--agl-python` points to a venv that has it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# At module level only what a training script has: runner processes start by importing the main module again, as
# they would a user's script, and the harness (test server, collector, adapter, timing) is imported where it is used
import lightning_otel
from lightning_otel.testing import runtime_agents
from lightning_otel.testing.runtime_agents import four_calls


class CpuMeter:
    """CPU seconds since `start()` of this process, of its reaped children (runner processes) and of the test
    server (psutil; None where it is not installed)."""

    def __init__(self, server_pid: int) -> None:
        try:
            import psutil

            self._server: Any = psutil.Process(server_pid)
        except ImportError:
            self._server = None
        self._at = self._now()

    def _now(self) -> tuple[float, float, float | None]:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        server = sum(self._server.cpu_times()[:2]) if self._server is not None else None
        return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime, server

    def start(self) -> None:
        self._at = self._now()

    def spent(self) -> tuple[float, float, float | None]:
        """(this process, reaped children, the server) since `start()`."""
        now = self._now()
        server = None if now[2] is None or self._at[2] is None else now[2] - self._at[2]
        return now[0] - self._at[0], now[1] - self._at[1], server


def in_server_units(spent: tuple[float, float, float | None]) -> tuple[float, float] | None:
    """(this process, children) CPU over the server's CPU: per rollout, in units of what the server spends on one."""
    own, children, server = spent
    if not server:
        return None
    return own / server, children / server


def end_to_end(
    base_url: str,
    rollouts: int,
    n_runners: int,
    concurrency: int,
    span_wait_s: float = 30.0,
    meter: CpuMeter | None = None,
) -> tuple[float, dict, dict]:
    """Rollouts through `Trainer.fit`; the batch's metrics and where each attempt's time went (read after the timed
    run from the collector's queue records and the spans: `lightning_otel.runtime.rollout_timing`). `meter`, when
    given, is started before the fit and its CPU figures (`CpuMeter.spent`) are in the metrics as `cpu`; the batch's
    start-up and steady pace (`rollout_timing.batch_pace`) are in them as `pace`."""
    from lightning_otel.collector import Client, EmbeddedCollector
    from lightning_otel.runtime.rollout_timing import attempt_phases, batch_pace, breakdown

    with (
        tempfile.TemporaryDirectory(prefix="agl-bench-") as folder,
        EmbeddedCollector.on_sqlite_file(Path(folder) / "collector.sqlite3") as addresses,
    ):
        trainer = lightning_otel.Trainer(
            n_runners=n_runners,
            algorithm=lightning_otel.Baseline(batch_size=rollouts),
            adapter={"agent_match": "write"},
            initial_resources={"main_llm": lightning_otel.LLM(base_url, "agl-tiny")},
            collector=addresses.query,  # the embedded collector a Trainer starts, kept open to read the queue
            progress=False,
            settings=lightning_otel.RunSettings(span_wait_s=span_wait_s),
            runner_options=lightning_otel.RunnerOptions(max_concurrency=concurrency),
        )
        tasks = [{"question": f"question {i}"} for i in range(rollouts)]
        if meter is not None:
            meter.start()
        started = time.perf_counter()
        result = trainer.fit(four_calls, tasks)
        elapsed = time.perf_counter() - started
        spent = meter.spent() if meter is not None else None  # before the breakdown's reads below
        (batch,) = result.train
        rollout_ids = batch.batch.rollout_ids
        with Client(addresses.query) as client:
            details = [client.rollout(r) for r in rollout_ids]
        phases = [attempt_phases(d, batch.spans.get(r, [])) for r, d in zip(rollout_ids, details, strict=True)]
        pace = batch_pace(details)
    return elapsed, batch.metrics() | {"batch_wall_s": batch.wall_s, "cpu": spent, "pace": pace}, breakdown(phases)


def uninstrumented(base_url: str, rollouts: int, concurrency: int) -> float:
    """The same agent function in one process, no trainer, no tracing: the floor."""
    resources = {"main_llm": lightning_otel.LLM(base_url, "agl-tiny")}

    async def main() -> float:
        semaphore = asyncio.Semaphore(concurrency)

        async def one(index: int) -> None:
            async with semaphore:
                await four_calls.function({"question": f"question {index}"}, resources)

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(rollouts)))
        elapsed = time.perf_counter() - started
        await runtime_agents._async_client(base_url).close()
        return elapsed

    runtime_agents._async_client.cache_clear()  # its clients belong to the loop that made them
    try:
        return asyncio.run(main())
    finally:
        runtime_agents._async_client.cache_clear()


# --- (b) adapter --------------------------------------------------------------------------------------------
def synthetic_rollout(index: int) -> list[dict]:
    """Flat spans as `Client.rollouts_spans` returns them: 4 agent spans each with one LLM child, a reward."""
    spans, trace = [], f"{index:032x}"
    rollout = {"agl.rollout.id": f"ro-{index}", "agl.attempt.id": "at-1"}
    base = 1_700_000_000_000_000_000 + index * 10_000_000
    for call in range(4):
        agent = "write" if call % 2 == 0 else "check"
        agent_id, llm_id = f"{call * 2 + 1:016x}", f"{call * 2 + 2:016x}"
        start = base + call * 1_000_000
        spans.append(
            {"traceId": trace, "spanId": agent_id, "parentSpanId": None, "name": f"invoke_agent {agent}", "kind": 1,
             "startTimeUnixNano": start, "endTimeUnixNano": start + 900_000, "service": "bench",
             "attributes": {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, **rollout},
             "events": [], "links": [], "status": {"code": 0, "message": ""}}
        )  # fmt: skip
        spans.append(
            {"traceId": trace, "spanId": llm_id, "parentSpanId": agent_id, "name": "chat agl-tiny", "kind": 3,
             "startTimeUnixNano": start + 1000, "endTimeUnixNano": start + 800_000, "service": "bench",
             "attributes": {
                 "gen_ai.operation.name": "chat", "gen_ai.agent.name": agent, "gen_ai.request.model": "agl-tiny",
                 "gen_ai.response.id": f"chatcmpl-{index}-{call}",
                 "agl.llm.prompt_token_ids": list(range(call * 300, call * 300 + 200)),
                 "agl.llm.response_token_ids": list(range(call * 300 + 200, call * 300 + 300)),
                 "agl.llm.response_logprobs": [-0.5] * 100, "agl.llm.token_ids_complete": True, **rollout},
             "events": [], "links": [], "status": {"code": 0, "message": ""}}
        )  # fmt: skip
    end = base + 5_000_000
    spans.append(
        {"traceId": trace, "spanId": f"{99:016x}", "parentSpanId": None, "name": "agl.reward", "kind": 1,
         "startTimeUnixNano": end, "endTimeUnixNano": end, "service": "bench",
         "attributes": {"agl.reward.value": 1.0, "agl.reward.name": "primary", **rollout},
         "events": [], "links": [], "status": {"code": 0, "message": ""}}
    )  # fmt: skip
    return spans


AGL_ADAPT = r"""
import json, sys, time
from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.types import Span
rollouts = json.load(open(sys.argv[1]))

def convert(index, flat):
    spans = []
    for seq, s in enumerate(flat):
        attributes = dict(s["attributes"])
        if s["name"].startswith("chat"):  # AGL reads token ids and names from its own attribute names
            attributes = {"gen_ai.request.model": "agl-tiny", "gen_ai.response.id": attributes["gen_ai.response.id"],
                          "prompt_token_ids": attributes["agl.llm.prompt_token_ids"],
                          "response_token_ids": attributes["agl.llm.response_token_ids"]}
            name = "openai.chat.completion"
        elif s["name"] == "agl.reward":
            attributes = {"agentops.task.output": json.dumps({"type": "reward", "value": 1.0})}
            name = "reward"
        else:
            attributes = {"agent.name": attributes["gen_ai.agent.name"]}
            name = s["name"]
        spans.append(Span.model_validate({
            "rollout_id": f"ro-{index}", "attempt_id": "at-1", "sequence_id": seq, "trace_id": s["traceId"],
            "span_id": s["spanId"], "parent_id": s["parentSpanId"], "name": name,
            "status": {"status_code": "UNSET"}, "attributes": attributes, "events": [], "links": [],
            "start_time": s["startTimeUnixNano"] / 1e9, "end_time": s["endTimeUnixNano"] / 1e9,
            "context": None, "parent": None, "resource": {"attributes": {}, "schema_url": ""}}))
    return spans

converted = [convert(i, r) for i, r in enumerate(rollouts)]
adapter = TracerTraceToTriplet(agent_match="write")
started = time.perf_counter()
triplets = sum(len(adapter.adapt(spans)) for spans in converted)
elapsed = time.perf_counter() - started
print(json.dumps({"seconds": elapsed, "triplets": triplets}))
"""


def adapter_throughput(count: int, agl_python: str | None) -> None:
    from lightning_otel.adapters.triplets import TraceToTriplet

    rollouts = [synthetic_rollout(i) for i in range(count)]
    spans = sum(len(r) for r in rollouts)
    adapter = TraceToTriplet(agent_match="write")
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        triplets = sum(len(adapter.adapt(r).triplets) for r in rollouts)
        best = min(best, time.perf_counter() - started)
    print(f"\n(b) adapter on {count} rollouts ({spans} spans), agent_match='write'")
    print(f"  lightning-otel TraceToTriplet    {spans / best:>10,.0f} spans/s  ({triplets} triplets, {best:.2f} s)")
    if not agl_python:
        print("  Agent Lightning: --agl-python not given, skipped")
        return
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(rollouts, handle)
    done = subprocess.run([agl_python, "-c", AGL_ADAPT, handle.name], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"  Agent Lightning adapter failed: {done.stderr.strip().splitlines()[-1:]}")
        return
    agl = json.loads(done.stdout.strip().splitlines()[-1])
    agl_rate = spans / agl["seconds"]
    print(f"  Agent Lightning 0.3 TracerTraceToTriplet {agl_rate:>10,.0f} spans/s  ({agl['triplets']} triplets)")
    print(f"  ratio ours / Agent Lightning: {spans / best / agl_rate:.1f}x")


# The configuration the training path's throughput target is set on (docs/performance.md): 2 runners, the default
# span_wait_s, at least TARGET_RATIO of the agent alone.
TARGET = (2, 30.0)
TARGET_RATIO = 0.8


def report_fit(
    rollouts: int, n_runners: int, span_wait_s: float, elapsed: float, metrics: dict, phases: dict, floor_rate: float
) -> tuple[float, float | None]:
    """Print one fit's lines; returns its ratio to the agent alone and its steady pace's (None without a pace)."""
    from lightning_otel.runtime.rollout_timing import format_breakdown

    # a run that lost rollouts or calls measured something else: no figure
    if metrics["succeeded"] != rollouts or metrics["triplets"] != 2 * rollouts:
        sys.exit(
            f"n_runners={n_runners}: {metrics['succeeded']} of {rollouts} rollouts succeeded, "
            f"{metrics['triplets']} triplets (expected {2 * rollouts}): not a measurement"
        )
    rate = rollouts / metrics["batch_wall_s"]
    print(
        f"  Trainer.fit, n_runners={n_runners}, span_wait_s={span_wait_s:g}: {rate:8.1f} rollouts/s over the "
        f"batch ({rollouts / elapsed:.1f}/s incl. start/stop {elapsed:.1f} s); "
        f"{metrics['succeeded']} succeeded, {metrics['triplets']} triplets, read+adapt "
        f"{metrics['batch_wall_s'] - metrics['wait_s']:.2f} s, {metrics['incomplete_rollouts']} incomplete; "
        f"ratio to uninstrumented {rate / floor_rate:.2f} (the agent alone's mean before and after it)"
    )
    units = in_server_units(metrics["cpu"])
    if units is not None:
        trainer_units, runner_units = units
        print(f"    CPU a rollout, in test-server units: the runners {runner_units:.2f} (start-up included), "
              f"the trainer and its collector {trainer_units:.2f}")  # fmt: skip
    pace = metrics["pace"]
    if pace:  # the batch's rate above = start-up (runners importing the agent) + steady pace + drain
        print(f"    first claim {pace['first_claim_s']:.2f} s after the batch was queued; steady pace "
              f"{pace['steady_per_s']:.1f} rollouts/s (20-80% of completions; "
              f"{pace['steady_per_s'] / floor_rate:.2f} of the agent alone); "
              f"drain {pace['drain_s']:.2f} s")  # fmt: skip
    print(format_breakdown(phases, indent="    "))
    return rate / floor_rate, pace["steady_per_s"] / floor_rate if pace else None


def summarise(n_runners: int, span_wait_s: float, ratios: list[float], steady: list[float]) -> str:
    """One configuration's fits in a line: every ratio to the agent alone, their mean, spread and median, how many
    reached `TARGET_RATIO`, and the steady pace's mean ratio (start-up and drain excluded)."""
    spread = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
    pace = f"; steady pace {statistics.fmean(steady):.2f} of the agent alone (mean)" if steady else ""
    return (
        f"  n_runners={n_runners}, span_wait_s={span_wait_s:g}, {len(ratios)} fits: ratios "
        f"{', '.join(f'{ratio:.2f}' for ratio in ratios)}; mean {statistics.fmean(ratios):.2f} (sd {spread:.2f}), "
        f"median {statistics.median(ratios):.2f}, {sum(r >= TARGET_RATIO for r in ratios)} of {len(ratios)} at "
        f"least {TARGET_RATIO}{pace}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8, help="rollouts at once per runner")
    parser.add_argument("--adapter-rollouts", type=int, default=10_000)
    parser.add_argument("--agl-python", help="python of a venv with agentlightning 0.3 (side-by-side adapter)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes, seconds: that it runs (the tests run it); two fits, so the summary runs too",
    )
    parser.add_argument("--repeats", type=int, default=1,
                        help="run the configurations this many times, interleaved, and summarise each one's ratios "
                             "(one fit's ratio moves by about 0.1 between runs on a 2-core VM)")  # fmt: skip
    parser.add_argument("--target-only", action="store_true",
                        help="only Trainer.fit with 2 runners and the default span_wait_s (the configuration the "
                             "throughput target is set on)")  # fmt: skip
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.quick:
        args.rollouts, args.adapter_rollouts, args.repeats = 40, 200, max(args.repeats, 2)
    from benchmarks.capture_overhead import start_server

    server, base_url = start_server()
    try:
        print(
            f"(a) end to end, {args.rollouts} rollouts of 4 LLM calls, zero-latency test server, {os.cpu_count()} cores"
        )
        meter = CpuMeter(server.pid)

        def agent_alone(when: str) -> tuple[float, str]:
            """The floor's rate and its line, measured again after each fit: this machine's speed drifts within a
            run, so each fit's ratio is to the mean of the runs just before and just after it."""
            meter.start()
            rate = args.rollouts / uninstrumented(base_url, args.rollouts, args.concurrency)
            units = in_server_units(meter.spent())
            cpu = f"; CPU a rollout {units[0]:.2f} test-server units" if units is not None else ""
            alone = "the agent alone (uninstrumented, one process, no trainer)"
            return rate, f"  {alone}, {when}: {rate:.1f} rollouts/s{cpu}"

        uninstrumented(base_url, 2 * args.concurrency, args.concurrency)  # untimed: openai imports its chat resources
        floor_before, line = agent_alone("before the first fit")
        print(line)
        # span_wait_s=0: the batch read checks completeness once and never waits (the read before complete reads)
        configurations = [TARGET] if args.quick or args.target_only else [(1, 30.0), TARGET, (2, 0.0)]
        ratios: dict[tuple[int, float], list[float]] = {configuration: [] for configuration in configurations}
        steady: dict[tuple[int, float], list[float]] = {configuration: [] for configuration in configurations}
        for _ in range(args.repeats):
            for n_runners, span_wait_s in configurations:
                fit = end_to_end(base_url, args.rollouts, n_runners, args.concurrency, span_wait_s, meter=meter)
                floor_after, after_line = agent_alone("after that fit")
                floor_rate, floor_before = (floor_before + floor_after) / 2, floor_after  # the fit's side-by-side floor
                ratio, steady_ratio = report_fit(args.rollouts, n_runners, span_wait_s, *fit, floor_rate)
                ratios[n_runners, span_wait_s].append(ratio)
                if steady_ratio is not None:
                    steady[n_runners, span_wait_s].append(steady_ratio)
                print(after_line)
        if args.repeats > 1:
            print(f"  ratio to the agent alone, {args.repeats} fits of each configuration (interleaved):")
            for configuration in configurations:
                print(summarise(*configuration, ratios[configuration], steady[configuration]))
    finally:
        server.terminate()
        server.wait(10)
    adapter_throughput(args.adapter_rollouts, args.agl_python)


if __name__ == "__main__":
    main()
