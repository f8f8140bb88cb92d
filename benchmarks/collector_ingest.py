"""Collector throughput and latency: the `agl-otel-collector` process under OTLP/HTTP load from other processes.

    python -m benchmarks.collector_ingest [--store sqlite|postgresql|both] [--seconds 10] [--big-store 1000000]

Measures, with acknowledgement only after commit:
1. sustained ingest: 4 sender processes, each looping 512-span protobuf batches (the SDK's default batch size),
   spans with realistic attributes (rollout ids, 20-50 token ids); spans/s committed;
2. ack latency at a fixed offered load (5k spans/s, paced), p50/p99;
3. RSS of the collector under overload (3x the senders, unpaced, 1 MiB in-flight budget) and how many 503s (a
   sender told to retry waits the answer's Retry-After, as OTLP exporters back off);
4. reading one 2,000-span rollout from a store holding `--big-store` spans (the trainer's hot path), median of 20;
5. PostgreSQL only: the sustained load split over two collectors on the one database, against one collector.
The baseline printed beside each figure is the same load against a bare receiver that decodes the protobuf and
drops it (no store): what storing costs is the ratio between the two.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import math
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

from lightning_otel.testing.otlp_factory import make_request, make_span

PB = {"content-type": "application/x-protobuf"}
BATCH = 512


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def batch_body(worker: int, n: int, rollouts: int = 64, al_rollouts: list | None = None) -> bytes:
    """512 LLM-like spans; `al_rollouts` adds Agent Lightning's (rollout, attempt) attributes for its store."""
    spans = []
    for s in range(BATCH):
        tokens = list(range(20 + s % 30))
        extra = {}
        if al_rollouts:
            rollout_id, attempt_id = al_rollouts[(n * BATCH + s) % len(al_rollouts)]
            extra = {"agentlightning.rollout_id": rollout_id, "agentlightning.attempt_id": attempt_id}
        spans.append(
            make_span(
                worker << 40 | n << 8 | s % 16 + 1,
                s + 1,
                parent=0,
                name="chat m",
                rollout=f"w{worker}-r{(n * BATCH + s) % rollouts}",
                attempt="a1",
                agent="writer",
                operation="chat",
                kind=3,
                attributes={
                    "agl.llm.prompt_token_ids": tokens,
                    "agl.llm.response_token_ids": tokens,
                    "gen_ai.usage.input_tokens": len(tokens),
                    **extra,
                },
            )
        )
    return make_request(spans, service="bench").SerializeToString()


# worker -> its batch bodies, built once in this process: a phase's senders are forked and inherit them, and the next
# phase's senders reuse them (building one body costs ~70 ms of CPU; the overload's 12 senders built 300 for a 1 s load)
_BODIES: dict[int, list[bytes]] = {}
# bodies a sender cycles through at most; the quick mode's are fewer (resent bodies are duplicates: still written)
MAX_DISTINCT = 256


def bodies_of(worker: int, seconds: float, al_rollouts: list | None = None) -> list[bytes]:
    """~25 batches/s a sender: that many distinct bodies for the run, not more; resent ones are still written and
    checked. Agent Lightning's (with its rollout attributes) are not kept."""
    distinct = min(MAX_DISTINCT, max(8, math.ceil(seconds * 25)))
    if al_rollouts:
        return [batch_body(worker, n, al_rollouts=al_rollouts) for n in range(distinct)]
    kept = _BODIES.setdefault(worker, [])
    kept += [batch_body(worker, n) for n in range(len(kept), distinct)]
    return kept[:distinct]


def sender(url: str, bodies: list[bytes], seconds: float, rate: float | None, results: mp.Queue) -> None:
    """Send batches for `seconds`; `rate` (spans/s for this worker) paces them. Reports latencies and statuses."""
    latencies, statuses = [], {}
    interval = BATCH / rate if rate else 0.0
    host, port = url.removeprefix("http://").split("/", 1)[0].rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)  # light: senders share the CPU
    started = time.perf_counter()
    n = 0
    while (now := time.perf_counter()) - started < seconds:
        if interval:
            due = started + n * interval
            if due > now:
                time.sleep(due - now)
        body = bodies[n % len(bodies)]
        sent = time.perf_counter()
        connection.request("POST", "/v1/traces", body=body, headers=PB)
        response = connection.getresponse()
        response.read()
        latencies.append(time.perf_counter() - sent)
        statuses[response.status] = statuses.get(response.status, 0) + 1
        n += 1
        if response.status == 503:  # told to retry: wait as OTLP exporters do (the SDK's back off for a second or more)
            time.sleep(float(response.getheader("retry-after") or 1))
    connection.close()
    results.put((latencies, statuses))


def run_senders(
    url: str | list[str], workers: int, seconds: float, rate: float | None = None, al_rollouts: list | None = None
) -> tuple[list[float], dict]:
    """`workers` sender processes; with several URLs (collectors), sender w sends to URL w modulo their number."""
    urls = [url] if isinstance(url, str) else url
    bodies = [bodies_of(w + 1, seconds, al_rollouts) for w in range(workers)]  # before the clock: not measured
    context = mp.get_context("fork")  # the senders inherit the bodies instead of a pickled copy
    results: mp.Queue = context.Queue()
    processes = [
        context.Process(
            target=sender, args=(urls[w % len(urls)], bodies[w], seconds, rate / workers if rate else None, results)
        )
        for w in range(workers)
    ]
    for process in processes:
        process.start()
    latencies, statuses = [], {}
    for _ in processes:
        lat, stat = results.get(timeout=seconds + 120)
        latencies += lat
        for key, value in stat.items():
            statuses[key] = statuses.get(key, 0) + value
    for process in processes:
        process.join()
    return latencies, statuses


class CollectorProcess:
    def __init__(self, store_url: str, *extra: str) -> None:
        self.http_port, self.query_port = _free_port(), _free_port()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lightning_otel.collector",
                "--store",
                store_url,
                "--grpc-port",
                "-1",
                "--http-port",
                str(self.http_port),
                "--query-port",
                str(self.query_port),
                *extra,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for line in self.process.stdout:  # type: ignore[union-attr]
            if line.startswith("  store"):
                break
        self.url = f"http://127.0.0.1:{self.http_port}/v1/traces"
        self.query = f"http://127.0.0.1:{self.query_port}"

    def rss_mib(self) -> float:
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):  # peak resident set
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


BARE_RECEIVER = """
import sys
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
import uvicorn
OK = pb.ExportTraceServiceResponse().SerializeToString()
async def export(request):
    pb.ExportTraceServiceRequest.FromString(await request.body())
    return Response(OK, media_type="application/x-protobuf")
uvicorn.run(Starlette(routes=[Route("/v1/traces", export, methods=["POST"])]), host="127.0.0.1",
            port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


def bare_receiver() -> tuple[subprocess.Popen, str]:
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-c", BARE_RECEIVER, str(port)])
    for _ in range(200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/")
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    return process, f"http://127.0.0.1:{port}/v1/traces"


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1] if len(values) > 1 else values[0]


def agent_lightning_rate(agl_bin: str, seconds: float) -> float:
    """Agent Lightning 0.3's store server (`agl store`, its in-memory backend: it has no durable one) under the same
    senders. Its /v1/traces only accepts spans of rollouts it knows, so 256 rollouts are registered first."""
    port = _free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # it imports LiteLLM: keep it offline
    process = subprocess.Popen(
        [agl_bin, "store", "--host", "127.0.0.1", "--port", str(port), "--log-level", "WARNING"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if httpx.get(base + "/v1/agl/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        rollouts = []
        for i in range(256):
            created = httpx.post(base + "/v1/agl/rollouts", json={"input": {"task": i}}).json()
            rollouts.append((created["rollout_id"], created["attempt"]["attempt_id"]))
        _lat, statuses = run_senders(base + "/v1/traces", 4, seconds, al_rollouts=rollouts)
        stored = httpx.get(base + f"/v1/agl/spans?rollout_id={rollouts[0][0]}&attempt_id={rollouts[0][1]}")
        print(
            f"Agent Lightning 0.3 store server (in memory, not durable): "
            f"{statuses.get(200, 0) * BATCH / seconds:,.0f} spans/s   statuses {statuses}   "
            f"(its span query answers HTTP {stored.status_code})"
        )
        return statuses.get(200, 0) * BATCH / seconds
    finally:
        process.terminate()
        process.wait(timeout=30)


def measure(store_url: str, label: str, seconds: float, big_store: int, *, sustained_only: bool = False) -> None:
    """Every measurement of the module docstring on one store (`sustained_only`: 1 and 5 only, the quick mode's
    PostgreSQL run)."""
    print(f"\n== {label}: {store_url.split('@')[-1]}")
    bare, bare_url = bare_receiver()
    try:
        lat, statuses = run_senders(bare_url, 4, seconds)
        bare_rate = statuses.get(200, 0) * BATCH / seconds
    finally:
        bare.terminate()
        bare.wait()
    collector = CollectorProcess(store_url)
    try:
        lat, statuses = run_senders(collector.url, 4, seconds)
        rate = statuses.get(200, 0) * BATCH / seconds
        if not rate:
            sys.exit(f"the collector committed no batch in {seconds:g} s (statuses {statuses}): nothing measured")
        print(
            f"sustained ingest (ack after commit): {rate:,.0f} spans/s   bare decode-and-drop receiver: "
            f"{bare_rate:,.0f} spans/s   ratio {rate / bare_rate:.2f}x   statuses {statuses}"
        )
        if sustained_only:
            collector.stop()
            two_collectors(store_url, seconds, rate)
            return
        lat, statuses = run_senders(collector.url, 2, seconds, rate=5000)
        print(
            f"ack latency at 5,000 spans/s offered: p50 {percentile(lat, 0.5) * 1000:.1f} ms   "
            f"p99 {percentile(lat, 0.99) * 1000:.1f} ms   statuses {statuses}"
        )
    finally:
        collector.stop()
    # 12 closed-loop senders (3x the concurrency above) against a 1 MiB in-flight budget: the excess is told to
    # retry (503 + Retry-After) instead of queueing in memory.
    collector = CollectorProcess(store_url, "--max-in-flight-bytes", str(1 << 20))
    try:
        _, statuses = run_senders(collector.url, 12, seconds)
        print(
            f"overload (12 unpaced senders, 1 MiB in-flight budget): peak RSS {collector.rss_mib():.0f} MiB   "
            f"committed {statuses.get(200, 0) * BATCH / seconds:,.0f} spans/s   statuses {statuses} "
            "(503 = told to retry; a sender waits its Retry-After)"
        )
    finally:
        collector.stop()
    if store_url.startswith("postgresql"):
        two_collectors(store_url, seconds, rate)
    if big_store:
        read_big_rollout(store_url, big_store)


def collectors_rate(store_url: str, n: int, seconds: float) -> tuple[float, dict]:
    """Spans/s acknowledged after commit with the 4 senders split over `n` collectors on one store, and the
    statuses; exits when nothing was committed (no figure)."""
    collectors = [CollectorProcess(store_url) for _ in range(n)]
    try:
        _, statuses = run_senders([c.url for c in collectors], 4, seconds)
    finally:
        for collector in collectors:
            collector.stop()
    rate = statuses.get(200, 0) * BATCH / seconds
    if not rate:
        sys.exit(f"{n} collector(s) committed no batch in {seconds:g} s (statuses {statuses}): nothing measured")
    return rate, statuses


def two_collectors(store_url: str, seconds: float, one_rate: float) -> None:
    """The same 4 senders split over two collectors on the one database (any of them ingests: scale-out)."""
    rate, statuses = collectors_rate(store_url, 2, seconds)
    print(f"two collectors on one PostgreSQL (ack after commit): {rate:,.0f} spans/s   one collector: "
          f"{one_rate:,.0f} spans/s   ratio {rate / one_rate:.2f}x   statuses {statuses}")  # fmt: skip


def read_big_rollout(store_url: str, total: int) -> None:
    collector = CollectorProcess(store_url)
    try:
        have = len(httpx.get(collector.query + "/v1/rollouts/target/spans", timeout=60).json()["spans"])
        if have < 2000:
            filler = total - 2000
            print(f"building a {total:,}-span store ...", flush=True)
            run_fill(collector.url, filler)
            spans = [
                make_span(
                    0xFEED << 20 | s // 100 + 1,
                    s + 1,
                    rollout="target",
                    attempt="a1",
                    name="chat m",
                    attributes={"agl.llm.prompt_token_ids": list(range(200))},
                )
                for s in range(2000)
            ]
            for start in range(0, 2000, 500):
                httpx.post(
                    collector.url,
                    content=make_request(spans[start : start + 500]).SerializeToString(),
                    headers=PB,
                    timeout=60,
                )
        timings = []
        with httpx.Client(timeout=60) as client:
            for _ in range(20):
                started = time.perf_counter()
                spans = client.get(collector.query + "/v1/rollouts/target/spans").json()["spans"]
                timings.append(time.perf_counter() - started)
        assert len(spans) == 2000, len(spans)
        print(
            f"read a 2,000-span rollout (200 token ids a span) from a {total:,}-span store, query API (HTTP + "
            f"JSON, 400k token ids to Python lists): median {statistics.median(timings) * 1000:.1f} ms"
        )
        store_ms = asyncio.run(_store_read_ms(store_url))
        print(f"  the same read at the store interface (index lookup + span bytes): median {store_ms:.1f} ms")
    finally:
        collector.stop()


async def _store_read_ms(store_url: str) -> float:
    from lightning_otel.collector.stores.stores import open_store

    store = open_store(store_url)
    await store.start()
    try:
        timings = []
        for _ in range(20):
            started = time.perf_counter()
            spans = await store.rollout_spans("target")
            timings.append(time.perf_counter() - started)
        assert len(spans) == 2000
        return statistics.median(timings) * 1000
    finally:
        await store.close()


def run_fill(url: str, spans: int) -> None:
    batches = spans // BATCH
    per_worker = batches // 4
    processes = [mp.Process(target=_fill_worker, args=(url, w + 100, per_worker)) for w in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()


def _fill_worker(url: str, worker: int, batches: int) -> None:
    with httpx.Client(timeout=60) as client:
        for n in range(batches):
            while client.post(url, content=batch_body(worker, n, rollouts=10_000), headers=PB).status_code != 200:
                time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--big-store", type=int, default=1_000_000, help="spans in the store for the read test")
    parser.add_argument(
        "--agent-lightning",
        metavar="AGL_BIN",
        help="path to the `agl` command of a separate venv with agentlightning==0.3.0: also measure "
        "its store server's /v1/traces under the same load",
    )
    parser.add_argument("--quick", action="store_true", help="1 s per load, a 20k-span store: that it runs")
    args = parser.parse_args()
    if args.quick:
        global MAX_DISTINCT
        args.store, args.seconds, args.big_store, MAX_DISTINCT = "both", 1.0, 20_000, 8
    if args.agent_lightning:
        print("\n== Agent Lightning 0.3 side by side (same senders, same batches)")
        theirs = agent_lightning_rate(args.agent_lightning, args.seconds)
        with tempfile.TemporaryDirectory(prefix="agl-bench-") as workdir:
            collector = CollectorProcess(f"sqlite:///{workdir}/side.sqlite3")
            try:
                _lat, statuses = run_senders(collector.url, 4, args.seconds)
            finally:
                collector.stop()
        ours = statuses.get(200, 0) * BATCH / args.seconds
        print(
            f"agl-otel-collector (SQLite, durable, ack after commit): {ours:,.0f} spans/s   ratio {ours / theirs:.1f}x"
        )
    if args.store in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="agl-bench-") as workdir:  # its 20k-3M-span store: removed after
            measure(f"sqlite:///{workdir}/bench.sqlite3", "SQLite (WAL, synchronous=NORMAL)", args.seconds,
                    args.big_store)  # fmt: skip
    if args.store in ("postgresql", "both"):
        from lightning_otel.testing.pg_cluster import ThrowawayPostgres

        cluster = ThrowawayPostgres(fsync=True).start()
        try:
            measure(cluster.create_database("bench"), "PostgreSQL 15 (fsync on)", args.seconds, args.big_store,
                    sustained_only=args.quick)  # fmt: skip
        finally:
            cluster.destroy()
    print(f"\nmachine: {os.cpu_count()} cores; senders, collector and database share them")


if __name__ == "__main__":
    main()
