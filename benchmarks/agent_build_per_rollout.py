"""What building a LangChain agent per rollout costs: ChatOpenAI's default HTTP clients vs one shared TLS context.

    python -m benchmarks.agent_build_per_rollout [--rollouts 200]

Trainers give each rollout its own base URL (`LLM.get_base_url(rollout_id, attempt_id)`, as Agent Lightning does),
and agents such as the spider tutorial's build their ChatOpenAI inside the rollout. langchain_openai caches its
default httpx clients by base URL, so every rollout misses that cache and builds two clients (sync and async), each
loading certifi's CA bundle into a new SSL context. Side by side in one run, CPU time per rollout of:
- default: `ChatOpenAI(base_url=<per rollout>)`, as the tutorial writes it;
- shared: the same with `http_client=` one process-wide httpx.Client and `http_async_client=` a new
  httpx.AsyncClient on one shared SSL context (what examples/spider/sql_graph.py does);
- the whole spider graph built both ways (`build_langgraph_sql_agent`, schema read included).
Nothing is sent: construction only. Needs the [langchain] extra; run from the repository root.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from langchain_openai import ChatOpenAI

from lightning_otel.agent_api.script_folder import import_from_folder

sql_graph, synthetic_spider = import_from_folder(Path(__file__).resolve().parents[1] / "examples" / "spider",
                                               "sql_graph", "synthetic_spider")  # fmt: skip
build = synthetic_spider.build


def default_llm(url: str) -> ChatOpenAI:
    return ChatOpenAI(model="policy", base_url=url, api_key="k")


def shared_llm(url: str) -> ChatOpenAI:
    """What sql_graph.py passes: its process-wide client, and an async client on its shared SSL context."""
    return ChatOpenAI(model="policy", base_url=url, api_key="k", http_client=sql_graph._shared_http_client(),
                      http_async_client=httpx.AsyncClient(verify=sql_graph._tls_context()))  # fmt: skip


def cpu_ms_per_rollout(name: str, build: Callable[[str], object], rollouts: int) -> float:
    """URLs unique to this row too: langchain_openai's client cache must not hit on another row's rollouts."""
    build(f"http://127.0.0.1:9/{name}/warmup/v1")  # imports and first-use caches out of the measurement
    started = time.process_time()
    for i in range(rollouts):
        build(f"http://127.0.0.1:9/{name}/rollout/ro-{i}/attempt/at-1/v1")
    return (time.process_time() - started) / rollouts * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="10 rollouts, seconds: that it runs")
    args = parser.parse_args()
    if args.quick:
        args.rollouts = 10
    with tempfile.TemporaryDirectory() as directory:
        build(directory)
        database = str(next(Path(directory).glob("database/*/*.sqlite")))

        def graph(url: str) -> object:
            return sql_graph.build_langgraph_sql_agent(database, url, "policy", {"temperature": 1.0}, 1, 256)

        def graph_default_clients(url: str) -> object:
            # the tutorial's graph as it was: no http_client / http_async_client passed to ChatOpenAI
            original = sql_graph.ChatOpenAI
            sql_graph.ChatOpenAI = lambda **kw: original(  # type: ignore[misc]
                **{k: v for k, v in kw.items() if k not in ("http_client", "http_async_client")}
            )
            try:
                return graph(url)
            finally:
                sql_graph.ChatOpenAI = original  # type: ignore[misc]

        builders = {
            "ChatOpenAI, default clients": default_llm,
            "ChatOpenAI, shared TLS context": shared_llm,
            "spider graph, default clients": graph_default_clients,
            "spider graph, shared TLS context": graph,
        }
        rows = [(name, cpu_ms_per_rollout(f"row{i}", build, args.rollouts)) for i, (name, build) in
                enumerate(builders.items())]  # fmt: skip
    print(f"CPU ms per rollout ({args.rollouts} rollouts, each its own base URL, construction only):")
    for name, ms in rows:
        print(f"  {name:34s} {ms:7.2f} ms")
    print(f"ratio ChatOpenAI default / shared: {rows[0][1] / rows[1][1]:.1f}x; "
          f"spider graph: {rows[2][1] / rows[3][1]:.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
