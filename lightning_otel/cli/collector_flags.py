"""The collector and runner flags of `lightning-otel train` (and its dry run) as the Trainer's arguments."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any


def collector_options(args: argparse.Namespace, store_url: str | None = None) -> dict[str, Any]:
    """The Trainer's collector and runners: a running collector, or the embedded one (over `store_url`); runner
    actors on Ray when asked."""
    import lightning_otel
    from lightning_otel.collector.server import CollectorConfig
    from lightning_otel.runtime.trainer import refuse_embedded_when_unmanaged

    refuse_embedded_when_unmanaged(args.collector)
    embedded = CollectorConfig.embedded(host=args.collector_host, http_port=args.otlp_port,
                                        query_port=args.collector_port)  # fmt: skip
    if store_url is not None:
        embedded = replace(embedded, store_url=store_url)
    runners = None
    if args.runners_on == "ray":
        runners = lightning_otel.RayRunners(n=args.runners, num_cpus=args.runner_cpus, address=args.ray_address)
    elif args.ray_address or args.runner_cpus != 1.0:  # not silently ignored
        raise ValueError("--ray-address and --runner-cpus are for runner actors: add --runners-on ray")
    return {"runners": runners, "collector": args.collector or embedded}


def run_settings(args: argparse.Namespace, run_id: str | None = None) -> Any:
    """The Trainer's `RunSettings` from the flags (the policy's notify file, the late-span wait) and a run id."""
    import lightning_otel

    return lightning_otel.RunSettings(run_id=run_id, policy_notify_file=args.policy_notify_file,
                                      span_wait_s=args.span_wait_s)  # fmt: skip


__all__ = ["collector_options", "run_settings"]
