"""A small real training run recorded into a SQLite store, for the rollout view's tests (API and browser).

The SQL agent of examples/sql_agent (write, check, rewrite agents) runs in two runner processes against the test
server (its real tokenizer, token ids and logprobs), with `agent_match="write"` and content capture on; 2 steps of
`Baseline` and a validation batch. One task always raises, so two rollouts per step end failed: the page must say
why they gave no sample. The run records the per-call credit settings a training with `advantage="anchor"` records
(discount 0.9), so the view shows each trained call's return and advantages.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning_otel
from lightning_otel.collector import CollectorConfig
from lightning_otel.testing import OpenAITestServer
from lightning_otel.testing.tokenizer import build_tokenizer
from lightning_otel.training.loop.credit import AnchorAdvantage

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "sql_agent"))
import agent as sql_example  # noqa: E402

TASKS = [*sql_example.DEV_TASKS, {"id": "broken", "question": "this one raises"}]


@lightning_otel.rollout
def sql_or_broken(task: dict[str, Any], resources: dict[str, Any], rollout: lightning_otel.Rollout) -> float:
    if task["id"] == "broken":
        raise RuntimeError("the agent raised on purpose: no sample can come from this rollout")
    return sql_example.sql_rollout(task, resources, rollout)


CREDIT = AnchorAdvantage(gamma=0.9, normalize_by_std=False)


def record(store: Path, tokenizer_dir: Path) -> dict[str, Any]:
    """2 Baseline steps (2 epochs of one batch) into `store`; the test server's tokenizer saved in `tokenizer_dir`."""
    build_tokenizer().save_pretrained(tokenizer_dir)  # the test server's own
    with OpenAITestServer(replies=sql_example.dev_replies) as server:
        trainer = lightning_otel.Trainer(
            n_runners=2,
            # Baseline's batches, recorded with the anchor estimator's settings (what the rollout view rebuilds)
            algorithm=lightning_otel.Baseline(
                batch_size=len(TASKS),
                n_rollouts=2,
                n_epochs=2,
                metadata={"training": lightning_otel.TrainingOptions().rollout_settings(CREDIT)},
            ),
            adapter={"agent_match": "write"},
            initial_resources={"main_llm": lightning_otel.LLM(server.base_url, "agl-tiny")},
            collector=CollectorConfig.embedded(store_url=f"sqlite:///{store}"),
            progress=False,
            settings=lightning_otel.RunSettings(max_attempts=2, span_wait_s=10),
            runner_options=lightning_otel.RunnerOptions(capture_content=True),
        )
        result = trainer.fit(sql_or_broken, TASKS, val_dataset=TASKS[:2])
    return {"result": result, "served": dict(server.served)}


JAEGER_UI = "http://jaeger.example:16686"
PHOENIX_UI = "http://phoenix.example:6006/"


@contextlib.contextmanager
def served(work: Path, token: str) -> Iterator[dict[str, Any]]:
    """`record` into `work`, then a collector on that store (bearer `token`, the tokenizer, Jaeger and Phoenix
    links): the record's result and served calls, with `url`, an authorized `http` client and a `client`."""
    import httpx

    from lightning_otel.collector import Client, CollectorConfig, EmbeddedCollector

    outcome = record(work / "store.sqlite3", work / "tokenizer")
    config = CollectorConfig(http_port=0, grpc_port=None, query_port=0, store_url=f"sqlite:///{work / 'store.sqlite3'}",
                             auth_token=token, tokenizer=str(work / "tokenizer"), jaeger_ui_url=JAEGER_UI,
                             phoenix_ui_url=PHOENIX_UI)  # fmt: skip
    with EmbeddedCollector(config) as addresses:
        http = httpx.Client(base_url=addresses.query, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        yield {**outcome, "http": http, "client": Client(addresses.query, auth_token=token), "url": addresses.query}
